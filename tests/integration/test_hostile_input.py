"""Hostile input on real worker processes (issue 11 items 1, 2, 7 and 8).

* a Write onto a FIFO and a Read of it: refused at once, the worker goes on;
* a catastrophic regex, in the session worker (local placement) and on the
  tool worker (remote): no process freezes, a neighbour session's calls do
  not time out;
* a Bash reading ``/proc/$PPID/environ``: no planted secret reaches the
  ledger, the worker logs or the batch report;
* Redis restarted under running sessions: no worker exits by itself.

Before issue 11 the first two hung their worker for good, the third leaked
the database password, the fourth killed every session worker.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from bench.chaos_rig import RedisServer
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import LEASE_DB, Fleet, make_repo, submit, wait_done, wait_for
from tests.conftest import need_service

pytestmark = pytest.mark.slow

CATASTROPHIC = "^(a+)+$"


def _results(pg: SqlLedger, session_id: str) -> dict[str, dict[str, Any]]:
    (run,) = pg.runs_of(session_id)
    return {
        str(e.call_id): e.payload for e in pg.events(run.run_id) if e.type is EventType.TOOL_RESULT
    }


def _hostile_repo(path: Path) -> Path:
    repo = make_repo(path)
    os.mkfifo(repo / "pipe")
    (repo / "aaa.txt").write_text("a" * 40_000 + "!\n")
    return repo


def test_a_fifo_is_refused_and_the_worker_goes_on(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    fleet.start_worker(queues="sessions,tools")
    spec = scripted_spec(
        [
            {
                "text": "write",
                "tool_calls": [
                    {"id": "w", "name": "Write", "arguments": {"path": "pipe", "content": "x"}}
                ],
            },
            {
                "text": "read",
                "tool_calls": [
                    {"id": "r", "name": "Read", "arguments": {"path": "pipe"}},
                    {"id": "g", "name": "Grep", "arguments": {"pattern": "x", "path": "pipe"}},
                ],
            },
            {"text": "The pipe is not a file."},
        ],
        tools=["Write", "Read", "Grep"],
    )
    sid = submit(fleet.dispatcher(pg), spec, repo)
    wait_done(pg, sid, timeout=60)
    results = _results(pg, sid)
    assert {k: v["status"] for k, v in results.items()} == {
        "w": "error",
        "r": "error",
        "g": "error",
    }
    assert all(
        "FIFO" in v["content"] or "not a regular file" in v["content"] for v in results.values()
    )
    after = submit(fleet.dispatcher(pg), scripted_spec([{"text": "still here"}]), repo)
    wait_done(pg, after, timeout=30)  # the worker was not left blocked


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_a_catastrophic_regex_freezes_no_worker(
    placement: str, fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = _hostile_repo(tmp_path / "repo")
    fleet.start_worker(queues="sessions", concurrency=4, name="sessions")
    tools = fleet.start_worker(queues="tools", concurrency=4, name="tools")
    hostile = scripted_spec(
        [
            {
                "text": "grep",
                "tool_calls": [
                    {"id": f"g{i}", "name": "Grep", "arguments": {"pattern": CATASTROPHIC}}
                    for i in range(3)
                ],
            },
            {"text": "No line matches."},
        ],
        tools=["Grep"],
        placement={"Grep": placement},
    )
    neighbour = scripted_spec(
        [
            {
                "text": "look",
                "tool_calls": [
                    {"id": "glob", "name": "Glob", "arguments": {"pattern": "**/*"}},
                    {"id": "read", "name": "Read", "arguments": {"path": "README.md"}},
                ],
            },
            {"text": "Looked."},
        ],
        tools=["Glob", "Read"],
        placement={"Read": "remote"},
    )
    dispatcher = fleet.dispatcher(pg)
    bad = submit(dispatcher, hostile, repo)
    time.sleep(0.5)  # the hostile calls are running
    good = submit(dispatcher, neighbour, make_repo(tmp_path / "other"))
    wait_done(pg, good, timeout=60)
    wait_done(pg, bad, timeout=60)
    assert {v["status"] for v in _results(pg, bad).values()} == {"ok"}
    assert {v["status"] for v in _results(pg, good).values()} == {"ok"}
    for sid in (bad, good):
        (run,) = pg.runs_of(sid)
        assert run.terminal_state is not None and run.terminal_state.value == "completed"
        assert len({e.epoch for e in pg.events(run.run_id)[1:]}) == 1  # never lost its lease
    if placement == "remote":
        assert tools.text().count("nahida.run_tool_call") >= 3


PASSWORD = "PlantedPw5150"
PLANTED_KEY = "planted-provider-key-0042"


def test_a_planted_secret_reaches_no_ledger_row_log_or_report(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    """PostgreSQL here trusts local connections, so the password is never checked:
    it only has to be in the worker's configuration to be stolen."""
    user, rest = postgres_url.split("://", 1)[1].split("@", 1)
    planted_url = f"postgresql+psycopg://{user.split(':')[0]}:{PASSWORD}@{rest}"
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(
        postgres_url=planted_url,
        redis_url=redis_server,
        workdir=logs,
        extra_env={"MY_LLM_KEY": PLANTED_KEY, "OPENAI_API_KEY": f"sk-{PLANTED_KEY}"},
    )
    try:
        fleet.start_worker()
        dispatcher = fleet.dispatcher(pg)
        batch = dispatcher.create_batch("planted", {"job": "planted"})
        spec = scripted_spec(
            [
                {
                    "text": "look",
                    "tool_calls": [
                        {
                            "id": "steal",
                            "name": "Bash",
                            "arguments": {
                                "command": "tr '\\0' '\\n' < /proc/$PPID/environ; env; "
                                "cat /proc/$PPID/cmdline | tr '\\0' ' '"
                            },
                        }
                    ],
                },
                {"text": "Nothing to see."},
            ],
            tools=["Bash"],
        )
        session, _ = dispatcher.submit(
            spec, workspace=str(make_repo(tmp_path / "repo")), batch_id=batch.batch_id
        )
        wait_done(pg, session.session_id, timeout=60)
        assert _results(pg, session.session_id)["steal"]["status"] == "ok"
        from nahida_workers.cli.report import batch_report

        report = json.dumps(
            batch_report(pg, batch.batch_id, started_at=datetime.now(UTC)), default=str
        )
        with pg.engine.connect() as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                )
            ]
            dump = "".join(  # every row of every table, as PostgreSQL's own JSON text
                str(row[0])
                for t in tables
                for row in conn.execute(text(f'SELECT row_to_json(t)::text FROM "{t}" t'))
            )
        assert "exit code: 0" in dump
        logs_text = "".join(w.text() for w in fleet.workers)
        for where, haystack in (("ledger", dump), ("report", report), ("logs", logs_text)):
            assert PASSWORD not in haystack, f"the database password is in the {where}"
            assert PLANTED_KEY not in haystack, f"the provider key is in the {where}"
    finally:
        fleet.stop()


def test_a_redis_restart_kills_no_worker(postgres_url: str, pg: SqlLedger, tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        need_service("redis-server", FileNotFoundError("redis-server is not on PATH"))
    server = RedisServer(tmp_path)
    server.start()
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url=postgres_url, redis_url=server.url, workdir=logs)
    stop = threading.Event()
    try:
        workers = [fleet.start_worker(concurrency=4, name=f"s{i}") for i in range(2)]
        dispatcher = fleet.dispatcher(pg)
        leases = RedisLeaseStore.from_url(f"{server.url}/{LEASE_DB}", key_prefix=fleet.prefix)
        sweeper = Sweeper(
            pg, leases, dispatcher, SystemClock(), redispatch_after_s=3.0,
            redispatch_queued_after_s=6.0, broker_reset=lambda: True,
        )  # fmt: skip

        def sweep() -> None:  # celery beat's job, riding out the restarts
            while not stop.wait(1.0):
                try:
                    sweeper.sweep()
                except Exception:  # Redis is down for a moment
                    continue

        threading.Thread(target=sweep, daemon=True).start()
        sessions = []
        for round_ in range(3):
            for i in range(8):  # tasks in every phase when Redis goes: some acking, some running
                command = f"sleep {0.2 + 0.25 * i:.2f}"
                spec = scripted_spec(
                    [
                        {
                            "text": "work",
                            "tool_calls": [
                                {"id": "b", "name": "Bash", "arguments": {"command": command}}
                            ],
                        },
                        {"text": "Done."},
                    ],
                    tools=["Bash"],
                )
                repo = make_repo(tmp_path / f"r{round_}-{i}")
                key = f"restart-{round_}-{i}"
                sessions.append(
                    wait_for(lambda s=spec, r=repo, k=key: _try_submit(dispatcher, s, r, k),
                             timeout=30, what="a submit through the restarted broker")
                )  # fmt: skip
            time.sleep(1.0)  # the tasks are running, their messages unacknowledged
            server.restart()
            time.sleep(3.0)  # the workers notice, reconnect, and the late acks happen
            exited = [w.name for w in workers if w.proc.poll() is not None]
            assert not exited, f"workers exited by themselves after a Redis restart: {exited}"
        for sid in sessions:
            wait_done(pg, sid, timeout=90)
        assert all(w.proc.poll() is None for w in workers)
        assert "Unrecoverable error" not in "".join(w.text() for w in workers)
        for sid in sessions:
            session = pg.get_session(sid)
            assert session is not None and session.status is SessionStatus.DONE
    finally:
        stop.set()
        fleet.stop()
        server.stop()


def _try_submit(dispatcher: Any, spec: Any, repo: Path, key: str) -> str | None:
    """Submit once (an idempotency key makes a retry find the session); None on failure."""
    try:
        session, _ = dispatcher.submit(spec, workspace=str(repo), idempotency_key=key)
    except Exception:  # the broker is restarting; the sweeper publishes it
        return None
    return str(session.session_id)
