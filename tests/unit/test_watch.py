"""``nahida watch``: a session with several runs is followed to its current run's end."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import fakeredis

from nahida_workers.cli.session_cmds import follow

KEY = "nahida:session:s-1:events"


def _add(client: Any, run_id: str, kind: str) -> None:
    client.xadd(KEY, {"kind": kind, "run_id": run_id, "data": json.dumps({"run": run_id})})


def test_an_earlier_runs_done_does_not_end_the_watch_of_a_running_session() -> None:
    client = fakeredis.FakeRedis()
    _add(client, "run-1", "final")
    _add(client, "run-1", "done")
    _add(client, "run-2", "tool_started")  # a steering message started run 2
    seen: list[tuple[str, str]] = []

    def later() -> None:
        time.sleep(0.3)
        _add(client, "run-2", "final")
        _add(client, "run-2", "done")

    writer = threading.Thread(target=later)
    writer.start()
    done = follow(
        client,
        KEY,
        session_done=lambda: False,  # run 2 is still running when watch starts
        emit=lambda kind, payload: seen.append((kind, payload["run"])),
        timeout_s=10,
        block_ms=100,
    )
    writer.join()
    assert done
    assert seen == [
        ("final", "run-1"),
        ("done", "run-1"),
        ("tool_started", "run-2"),
        ("final", "run-2"),
        ("done", "run-2"),
    ]


def test_a_done_session_prints_its_history_and_returns_at_once() -> None:
    client = fakeredis.FakeRedis()
    for run in ("run-1", "run-2"):
        _add(client, run, "final")
        _add(client, run, "done")
    seen: list[str] = []
    started = time.monotonic()
    assert follow(
        client, KEY, session_done=lambda: True, emit=lambda k, p: seen.append(k), timeout_s=10
    )
    assert seen == ["final", "done", "final", "done"]
    assert time.monotonic() - started < 1.0


def test_watch_times_out_when_nothing_ends() -> None:
    client = fakeredis.FakeRedis()
    _add(client, "run-1", "tool_started")
    assert not follow(
        client, KEY, session_done=lambda: False, emit=lambda k, p: None, timeout_s=0.3, block_ms=50
    )
