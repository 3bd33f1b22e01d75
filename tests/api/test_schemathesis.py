"""schemathesis over the whole ``/v1`` API of a real ``nahida serve`` on PostgreSQL: 0 failures.

Every check (``--checks all``) and the examples, coverage, fuzzing and
stateful phases (the schema's links: a created session leads to its page,
steer, cancel and events; a session to its runs; the batch list to a batch).

Settings, chosen so the run takes well under a minute on the shared machine:

* ``--seed 20`` and ``--max-examples 8`` (fuzzing, and per stateful step
  generation): the same cases every run;
* the coverage phase runs on every operation but ``POST /v1/sessions``,
  ``POST /v1/schedules`` and ``POST /v1/schedules/apply``, whose job schema
  makes it tens of thousands of cases (minutes); fuzzing and the stateful
  phase do cover them.  The full coverage run is one command in docs/api.md;
* ``POST /v1/sessions`` and the schedule writes may answer a schema-valid
  body with 400: a job's parts can disagree in ways JSON Schema cannot say (a
  scripted turn calling a tool the job does not offer, ``Task`` without
  ``agents``), and so can a schedule's timing (a cron expression, a time
  zone, a period shorter than beat's tick); ``GET /v1/usage`` answers a
  ``since`` that is no period nor ISO time with 400.  The test still requires
  that schema-valid jobs create sessions (201), so the schema describes jobs
  the server takes;
* ``NAHIDA_API_MAX_FOLLOW_S=0.5``: an event stream of a session no worker
  runs ends after its ``timeout`` (the schema states the bound);
* the token is set, so the ``ignored_auth`` check has something to check;
* a batch is seeded in the ledger (no ``/v1`` route creates batches);
* ``tests/api/schemathesis_hooks.py`` gives schema-valid session requests a
  workspace directory that exists on this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import ROOT, Fleet, make_repo
from tests.api.conftest import start_server
from tests.api.test_burst import private_fleet

__all__ = ["private_fleet"]

pytestmark = pytest.mark.slow

TOKEN = "schemathesis-token"
CONFIG = """
seed = 20

[generation]
max-examples = 8

[checks.negative_data_rejection]
# 413: a body generated past NAHIDA_API_MAX_BODY_BYTES is refused before it is
# read (every route documents it).
expected-statuses = [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx",
]

[auth.openapi.bearer]
bearer = "{token}"

[[operations]]
include-operation-id = "createSession"
phases.coverage.enabled = false
# More jobs than the other operations get: the test counts the sessions they create.
generation.max-examples = 16
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx",
]

[[operations]]
include-operation-id = "createSchedule"
phases.coverage.enabled = false
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "5xx",
]

[[operations]]
include-operation-id = "applySchedules"
phases.coverage.enabled = false
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "5xx",
]

[[operations]]
include-operation-id = "getUsage"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "5xx"]

# A side question is answered by the session's provider within the request: a
# generated script's `ask` turns may fail or run out, a documented 502.
[[operations]]
include-operation-id = "askSession"
checks.not_a_server_error.expected-statuses = ["1xx", "2xx", "3xx", "4xx", "502"]
# 400: the session's script has no `ask` turns (schema-valid; the job decides).
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "502",
]
"""


def test_schemathesis_finds_no_failure_over_the_whole_api(
    private_fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    dispatcher = private_fleet.dispatcher(pg)
    batch = dispatcher.create_batch("seeded", {}).batch_id
    dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace=str(repo), batch_id=batch)
    server = start_server(
        private_fleet,
        tmp_path,
        NAHIDA_API_TOKEN=TOKEN,
        **{
            "NAHIDA_API_MAX_FOLLOW_S": "0.5",
        },
    )
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG.format(token=TOKEN), encoding="utf-8")
    schema = tmp_path / "openapi.json"  # behind the token too: fetched with it, run from a file
    try:
        with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            schema.write_bytes(http.get("/openapi.json").raise_for_status().content)
        run = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "--config-file",
                str(config),
                "run",
                str(schema),
                "--url",
                server.url,
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--no-color",
            ],
            cwd=tmp_path,  # its cache (.schemathesis/) stays out of the repository
            env={
                **os.environ,
                "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
                "NAHIDA_TEST_WORKSPACE": str(repo),
                "PYTHONPATH": str(ROOT),
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    assert re.search(r"\b0 failures\b|No issues found", report) or "failures" not in report
    created = sum(1 for s in pg.sessions() if s.workspace == str(repo)) - 1  # less the seeded one
    assert created >= 5, f"schema-valid jobs created only {created} sessions:\n{report[-3000:]}"
    assert "Traceback" not in server.log.read_text()
