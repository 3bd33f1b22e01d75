"""NAHIDA_LOG_FORMAT=json: a real session worker logs JSON lines carrying the run's ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for

pytestmark = pytest.mark.slow


def test_json_worker_logs_carry_session_run_and_trace_ids(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.extra_env["NAHIDA_LOG_FORMAT"] = "json"
    worker = fleet.start_worker(queues="sessions", name="json1")
    spec = scripted_spec(
        [
            {"text": "look", "tool_calls": [{"id": "a", "name": "LS", "arguments": {}}]},
            {"text": "done"},
        ],
        tools=["LS"],
    )
    session_id = submit(fleet.dispatcher(pg), spec, make_repo(tmp_path / "r"))
    wait_done(pg, session_id)
    run = pg.runs_of(session_id)[0]
    worker.stop()
    lines = [line for line in worker.text().splitlines() if line.strip()]
    # Celery's start-up banner and its "Warm shutdown" are printed, not logged;
    # every logged line is one JSON object (a text log line starts "[2026-...").
    assert not [line for line in lines if re.match(r"^\[\d{4}-\d\d-\d\d", line)]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    mine = [r for r in records if r["session_id"] == session_id]
    assert mine, records
    assert any(r["run_id"] == run.run_id and r["trace_id"] == run.trace_id for r in mine)
    assert any("sealed" in r["message"] for r in mine)
    assert any(f"run {run.run_id}" in r["message"] for r in mine)  # each session is logged


def test_a_task_after_a_session_on_the_same_thread_logs_under_no_session_id(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    """One pool thread runs a session, then a schedule tick: the tick's lines carry
    no ids (the context is cleared at every task boundary, celery/app.py)."""
    from celery import Celery

    from nahida_workers.celery.config import SCHEDULE_TICK, celery_config
    from nahida_workers.settings import SESSIONS_QUEUE

    fleet.extra_env["NAHIDA_LOG_FORMAT"] = "json"
    worker = fleet.start_worker(queues="sessions", concurrency=1, name="json-tick")
    spec = scripted_spec([{"text": "done"}], tools=["LS"])
    session_id = submit(fleet.dispatcher(pg), spec, make_repo(tmp_path / "r"))
    wait_done(pg, session_id)
    publisher = Celery("nahida-test-tick", set_as_current=False)
    publisher.conf.update(celery_config(fleet.settings()))
    try:
        task_id = publisher.send_task(SCHEDULE_TICK, queue=SESSIONS_QUEUE).id
    finally:
        publisher.close()

    def records() -> list[dict[str, object]]:
        lines = worker.text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def tick_lines() -> list[dict[str, object]]:
        return [r for r in records() if task_id in str(r["message"])]

    wait_for(
        lambda: any("succeeded" in str(r["message"]) for r in tick_lines()),
        timeout=30,
        what="the tick to be logged",
    )
    assert any(r["session_id"] == session_id for r in records())  # the session was bound
    for record in tick_lines():
        assert record["session_id"] is None and record["run_id"] is None, record
