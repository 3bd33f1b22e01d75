"""NAHIDA_LOG_FORMAT=json: a real session worker logs JSON lines carrying the run's ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done

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
