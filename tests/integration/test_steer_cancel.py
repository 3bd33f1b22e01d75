"""`nahida steer` and `nahida cancel` against real workers (issue 6 items 1-2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.records import InboxStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for

pytestmark = pytest.mark.slow


def _nahida(args: list[str], fleet: Fleet) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nahida_workers.cli", *args],
        env={**os.environ, **fleet.env()},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_steer_while_running_and_cancel(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    fleet.start_worker(name="w")
    r1 = make_repo(tmp_path / "r1")
    marker = r1 / "started"  # inside the workspace: Bash writes nowhere else
    go = r1 / "go"  # the Bash call ends once the steering is recorded, however slow the CLI
    wait_go = f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done"
    busy = scripted_spec(
        [
            {
                "text": "working",
                "tool_calls": [
                    {
                        "id": "b",
                        "name": "Bash",
                        "arguments": {"command": f"touch {marker}; {wait_go}"},
                    }
                ],
            },
            {"text": "Done, and I looked at docs/ as asked."},
        ],
        tools=("Bash",),
    )
    dispatcher = fleet.dispatcher(pg)
    sid = submit(dispatcher, busy, r1)
    wait_for(marker.exists, timeout=20, what="the tool to start")
    for _ in range(2):  # the same message id twice is one message
        done = _nahida(["steer", sid, "also look at docs/", "--message-id", "s-1"], fleet)
        assert done.returncode == 0, done.stderr
    go.touch()
    wait_done(pg, sid, timeout=30)
    run = pg.runs_of(sid)[0]
    inputs = [e.payload for e in pg.events(run.run_id) if e.type is EventType.USER_INPUT]
    assert [p["text"] for p in inputs if p.get("source") == "inbox"] == ["also look at docs/"]
    (message,) = pg.inbox(sid)
    assert message.status is InboxStatus.ACKNOWLEDGED

    long = scripted_spec(
        [
            {
                "text": "waiting",
                "tool_calls": [{"id": "s", "name": "Bash", "arguments": {"command": "sleep 2"}}],
            }
        ]
        * 20
        + [{"text": "never"}],
        tools=("Bash",),
    )
    sid2 = submit(dispatcher, long, make_repo(tmp_path / "r2"))
    wait_for(
        lambda: pg.runs_of(sid2) and len(pg.events(pg.runs_of(sid2)[0].run_id)) > 2,
        timeout=20,
        what="the second session to start",
    )
    done = _nahida(["cancel", sid2], fleet)
    assert done.returncode == 0, done.stderr
    wait_done(pg, sid2, timeout=30)
    run2 = pg.runs_of(sid2)[0]
    assert run2.terminal_state is not None and run2.terminal_state.value == "cancelled"
    again = _nahida(["cancel", sid2], fleet)
    assert again.returncode == 2 and "nothing to cancel" in again.stderr
