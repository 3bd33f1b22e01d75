"""Fan-out over the real `tools` queue: a separate tool-worker process (issue 3)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, terminal_events, wait_done

pytestmark = pytest.mark.slow
SLEEP = "Sleep"  # registered by the test fleet (NAHIDA_EXTRA_TOOLS)


def _spec(n: int, ms: int) -> object:
    return scripted_spec(
        [
            {
                "text": "fan out",
                "tool_calls": [
                    {"id": f"s{i}", "name": "Sleep", "arguments": {"ms": ms}} for i in range(n)
                ]
                + [{"id": "g", "name": "Glob", "arguments": {"pattern": "**/*"}}],
            },
            {"text": "done"},
        ],
        tools=[SLEEP, "Glob"],
        placement={"Glob": "remote"},
    )


def test_calls_fan_out_to_the_tool_worker_in_parallel(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.start_worker(queues="sessions", name="sess")
    tools = fleet.start_worker(queues="tools", concurrency=8, name="tools")
    started = time.monotonic()
    sid = submit(fleet.dispatcher(pg), _spec(6, 1500), make_repo(tmp_path / "r"))
    wait_done(pg, sid, timeout=60)
    elapsed = time.monotonic() - started
    run = pg.runs_of(sid)[0]
    results = [e for e in pg.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == [*(f"s{i}" for i in range(6)), "g"]
    assert all(e.payload["status"] == "ok" for e in results)
    assert elapsed < 6 * 1.5, f"6 x 1.5 s calls took {elapsed:.1f}s: not parallel"
    assert tools.text().count("nahida.run_tool_call") >= 7


def test_sigkill_of_the_tool_worker_mid_batch_still_answers_every_call_once(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    """The killed worker's tasks are redelivered (visibility timeout) to a new
    tool worker and run again; the session gathers exactly one result per call."""
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=2.0, visibility_timeout_s=4.0)
    try:
        fleet.start_worker(queues="sessions", name="sess")
        victim = fleet.start_worker(queues="tools", concurrency=8, name="victim")
        sid = submit(fleet.dispatcher(pg), _spec(4, 3000), make_repo(tmp_path / "r"))
        deadline = time.monotonic() + 20
        while victim.text().count("received") < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        victim.kill()
        victim.proc.wait(timeout=10)
        fleet.start_worker(queues="tools", concurrency=8, name="heir")
        wait_done(pg, sid, timeout=90)

        run = pg.runs_of(sid)[0]
        events = pg.events(run.run_id)
        results = [e for e in events if e.type is EventType.TOOL_RESULT]
        call_ids = [e.call_id for e in events if e.type is EventType.TOOL_CALL]
        assert [e.call_id for e in results] == call_ids  # one each, in call order
        assert {e.payload["status"] for e in results} <= {"ok", "timed_out"}
        receipts = pg.receipts(run.run_id)
        assert sorted(r.call_id for r in receipts) == sorted(call_ids)
        assert all(r.status in (ToolStatus.OK, ToolStatus.TIMED_OUT) for r in receipts)
        assert len(terminal_events(pg, run.run_id)) == 1
        heir_runs = fleet.workers[-1].text().count("succeeded")
        assert heir_runs >= 1, "the redelivered calls ran on the new tool worker"
    finally:
        fleet.stop()
