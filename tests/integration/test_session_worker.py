"""Sessions on real Celery worker processes over real Redis and PostgreSQL.

Issue 2: the crash test (SIGKILL mid-Bash), case B01 (a redelivered copy of a
running session does nothing), and the sweeper re-dispatching a session
whose owner is gone.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, SessionStatus, ToolStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import (
    LEASE_DB,
    Fleet,
    make_repo,
    submit,
    terminal_events,
    wait_done,
    wait_for,
)
from tests.conftest import load_case

pytestmark = pytest.mark.slow


def _marker_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_session_completes_on_a_real_worker(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    fleet.start_worker()
    spec = scripted_spec(
        [
            {
                "text": "look",
                "tool_calls": [
                    {"id": "g", "name": "Glob", "arguments": {"pattern": "**/*.py"}},
                    {"id": "h", "name": "Bash", "arguments": {"command": "git log -1 --format=%H"}},
                ],
            },
            {"text": "Found one Python file."},
        ]
    )
    sid = submit(fleet.dispatcher(pg), spec, repo)
    wait_done(pg, sid, timeout=30)
    run = pg.runs_of(sid)[0]
    assert run.terminal_state is not None and run.terminal_state.value == "completed"
    receipts = {r.call_id: r for r in pg.receipts(run.run_id)}
    assert receipts["g"].evidence["count"] == 1
    assert receipts["h"].evidence["exit_code"] == 0
    assert all(e.epoch == 1 for e in pg.events(run.run_id)[1:])


def test_sigkill_mid_bash_is_finished_by_another_worker_without_rerunning(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    """SIGKILL the session worker while Bash runs; after the lease TTL another
    worker finishes: one terminal event, the killed call closed as
    `interrupted`, and the command ran once (marker file), not twice."""
    repo = make_repo(tmp_path / "repo")
    marker = repo / "marker.txt"  # inside the workspace: Bash writes nowhere else
    spec = scripted_spec(
        [
            {
                "text": "running",
                "tool_calls": [
                    {
                        "id": "slow",
                        "name": "Bash",
                        "arguments": {"command": f"echo ran >> {marker}; sleep 5; echo finished"},
                    },
                ],
            },
            {"text": "The command was interrupted; stopping here."},
        ]
    )
    first = fleet.start_worker(name="first")
    sid = submit(fleet.dispatcher(pg), spec, repo)
    wait_for(lambda: _marker_lines(marker), timeout=20, what="the Bash tool to start")
    first.kill()  # SIGKILL: no cleanup, no ack, lease left to expire
    first.proc.wait(timeout=10)
    fleet.start_worker(name="second")
    wait_done(pg, sid, timeout=60)

    run = pg.runs_of(sid)[0]
    events = pg.events(run.run_id)
    assert len(terminal_events(pg, run.run_id)) == 1
    assert events[-1].type is EventType.TERMINAL
    results = [e for e in events if e.type is EventType.TOOL_RESULT and e.call_id == "slow"]
    assert len(results) == 1
    assert results[0].payload["status"] == ToolStatus.INTERRUPTED.value
    assert results[0].payload["synthetic"] is True
    assert _marker_lines(marker) == ["ran"], "the killed command must not run again"
    # no execution finished: the one receipt says so (issue 10 item 7)
    (receipt,) = pg.receipts(run.run_id)
    assert receipt.status is ToolStatus.INTERRUPTED and receipt.evidence["synthetic"] is True
    # the second owner wrote the recovery and everything after it, at a higher epoch
    assert {e.epoch for e in events if e.type is EventType.TOOL_RESULT} == {2}
    assert run.terminal_state is not None


def test_b01_redelivered_copies_of_a_running_session_do_nothing(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    """Case B01: the broker hands a running session out again (visibility
    timeout shorter than the run); the copies find the lease held, make no
    provider call, run no tool and are acked; a copy after the end is a no-op."""
    case = load_case("B01")
    assert case["expected"]["assertions"]
    logs = tmp_path / "logs"
    logs.mkdir()
    # A run of ~8 s against a 3 s visibility timeout: Redis restores the
    # unacked message while worker A still runs it (the bug's timeline, scaled).
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=1.5, visibility_timeout_s=3.0)
    try:
        a = fleet.start_worker(name="A", concurrency=1)
        b = fleet.start_worker(name="B", concurrency=1)
        repo = make_repo(tmp_path / "repo")
        marker = repo / "calls.txt"  # inside the workspace: Bash writes nowhere else
        spec = scripted_spec(
            [
                {
                    "text": "step",
                    "delay_s": 1.0,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "name": "Bash",
                            "arguments": {"command": f"echo c1 >> {marker}; sleep 3"},
                        },
                    ],
                },
                {
                    "text": "step",
                    "delay_s": 1.0,
                    "tool_calls": [
                        {
                            "id": "c2",
                            "name": "Bash",
                            "arguments": {"command": f"echo c2 >> {marker}; sleep 2"},
                        },
                    ],
                },
                {"text": "done"},
            ]
        )
        dispatcher = fleet.dispatcher(pg)
        sid = submit(dispatcher, spec, repo)
        wait_done(pg, sid, timeout=60)
        held = a.text().count("lease held") + b.text().count("lease held")
        assert held >= 1, "the broker should have redelivered the running session at least once"

        runs = pg.runs_of(sid)
        assert len(runs) == 1
        run = runs[0]
        events = pg.events(run.run_id)
        assert {e.epoch for e in events[1:]} == {1}, "one owner, fence token 1, wrote everything"
        assert [e.payload["turn"] for e in events if e.type is EventType.ASSISTANT_OUTPUT] == [
            0,
            1,
            2,
        ]
        assert _marker_lines(marker) == ["c1", "c2"]
        receipts = pg.receipts(run.run_id)
        assert sorted(r.call_id for r in receipts) == ["c1", "c2"]
        assert run.terminal_state is not None and run.terminal_state.value == "completed"

        # delivery 5: a copy after the run is terminal is acked as a no-op
        before = (len(events), pg.get_session(sid).lease_epoch)  # type: ignore[union-attr]
        dispatcher.redispatch(sid)
        wait_for(
            lambda: "already_done" in a.text() + b.text(),
            timeout=20,
            what="the late copy to be acked as already done",
        )
        after = (len(pg.events(run.run_id)), pg.get_session(sid).lease_epoch)  # type: ignore[union-attr]
        assert after == before
    finally:
        fleet.stop()


def test_sweeper_redispatches_a_session_whose_owner_died(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    """With a broker visibility timeout far above the lease TTL, the sweeper
    is what brings back a session whose worker was SIGKILLed."""
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=1.0, visibility_timeout_s=3600)
    try:
        repo = make_repo(tmp_path / "repo")
        marker = repo / "m.txt"  # inside the workspace: Bash writes nowhere else
        spec = scripted_spec(
            [
                {
                    "text": "x",
                    "tool_calls": [
                        {
                            "id": "s",
                            "name": "Bash",
                            "arguments": {"command": f"echo x >> {marker}; sleep 30"},
                        },
                    ],
                },
                {"text": "stopped"},
            ]
        )
        victim = fleet.start_worker(name="victim")
        dispatcher = fleet.dispatcher(pg)
        sid = submit(dispatcher, spec, repo)
        wait_for(lambda: _marker_lines(marker), timeout=20, what="the tool to start")
        victim.kill()
        victim.proc.wait(timeout=10)
        fleet.start_worker(name="rescuer")
        settings = fleet.settings()
        leases = RedisLeaseStore.from_url(f"{redis_server}/{LEASE_DB}", key_prefix=fleet.prefix)
        sweeper = Sweeper(pg, leases, dispatcher, SystemClock(), redispatch_after_s=0.5)
        assert settings.lease_ttl_s == 1.0
        wait_for(lambda: leases.holder(sid) is None, timeout=10, what="the lease to expire")
        time.sleep(0.6)  # the session must be quiet for redispatch_after_s
        report = sweeper.sweep()
        assert report.redispatched == (sid,)
        assert sweeper.sweep().redispatched == ()  # touched: not re-dispatched again at once
        wait_done(pg, sid, timeout=30)
        run = pg.runs_of(sid)[0]
        assert len(terminal_events(pg, run.run_id)) == 1
        assert _marker_lines(marker) == ["x"]
        assert pg.get_session(sid).status is SessionStatus.DONE  # type: ignore[union-attr]
    finally:
        fleet.stop()
