"""A job's tool names never import code, in every real process a job reaches.

Before, ``"tools": ["os:abort"]`` posted to ``nahida serve`` made it import
``os`` and call ``abort()``: one request killed the server.  Here the same
strings (and their neighbours: other modules, an agent profile's tools, a
stop hook) go to a real ``nahida serve``, to ``nahida batch`` and ``nahida
schedule add``, and -- written into the ledger directly, as if the API had
been bypassed -- to a real session worker.  Each refuses with a usage error
and stays up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import TerminalState
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done
from tests.api.conftest import Server
from tests.cli.helpers import clean_env, nahida

pytestmark = pytest.mark.slow

SCRIPT = {"kind": "scripted", "script": {"turns": [{"text": "done"}]}}
CODE_NAMES = ["os:abort", "os:_exit", "posix:abort", "signal:pause", "builtins:exit", " os:abort"]


def _jobs(names: list[str] = CODE_NAMES) -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    for name in names:
        base = {"name": "hostile", "prompt": "p", "provider": SCRIPT}
        jobs[f"tools {name!r}"] = {**base, "tools": ["Read", name]}
        jobs[f"agent tools {name!r}"] = {
            **base,
            "tools": ["Read", "Task"],
            "agents": {"helper": {"provider": SCRIPT, "tools": ["Read", name]}},
        }
        jobs[f"stop hook {name!r}"] = {**base, "tools": ["Read"], "stop_hooks": [name]}
    return jobs


def _alive(server: Server) -> None:
    assert server.proc.poll() is None, server.log.read_text()
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200


def test_a_posted_job_naming_code_is_a_4xx_and_the_server_stays_up(
    server: Server, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    with server.client() as http:
        for what, job in _jobs().items():
            response = http.post("/v1/sessions", json={"job": job, "workspace": str(repo)})
            assert 400 <= response.status_code < 500, (what, response.status_code, response.text)
            message = response.json()["error"]["message"]
            assert "unknown tool" in message or "stop hook" in message, (what, message)
            _alive(server)
        fine = {"name": "ok", "prompt": "p", "provider": SCRIPT, "tools": ["Read"]}
        accepted = http.post("/v1/sessions", json={"job": fine, "workspace": str(repo)})
        assert accepted.status_code in (201, 202), accepted.text


def test_batch_and_schedule_add_refuse_a_job_naming_code(tmp_path: Path) -> None:
    import yaml

    repo = make_repo(tmp_path / "repo")
    env = clean_env(NAHIDA_DATABASE_URL=f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    for what, job in _jobs(CODE_NAMES[:2]).items():  # each command starts a process: two
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        where = ["--local", "--repo", str(repo)]
        for args in (
            ["batch", str(path), *where],
            ["schedule", "add", "h", "--job", str(path), "--every", "1h", *where],
        ):
            done = nahida(list(args), cwd=tmp_path, env=env, timeout=60)
            assert done.code == 2, (what, args[0], done.output)
            line = done.one_error_line()
            assert "unknown tool" in line or "stop hook" in line, (what, line)


def test_a_worker_refuses_a_ledger_row_naming_code_and_goes_on(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    """The dispatcher here writes the session without the entry points' check:
    the worker's own registry check must refuse it."""
    worker = fleet.start_worker(queues="sessions", concurrency=1)
    dispatcher = fleet.dispatcher(pg)
    repo = make_repo(tmp_path / "repo")
    hostile = [
        scripted_spec([{"text": "done"}], tools=["Read", "os:abort"]),
        scripted_spec([{"text": "done"}], tools=["Read"], stop_hooks=["os:abort"]),
    ]
    for spec in hostile:
        session_id = submit(dispatcher, spec, repo)
        wait_done(pg, session_id, timeout=60)
        (run,) = pg.runs_of(session_id)
        assert run.terminal_state is TerminalState.FAILED, run
        assert run.failure_code is not None and run.failure_code.value == "invalid_config"
        assert worker.proc.poll() is None, worker.text()[-3000:]
    after = submit(dispatcher, scripted_spec([{"text": "done"}], tools=["Read"]), repo)
    wait_done(pg, after, timeout=60)
    assert pg.runs_of(after)[0].terminal_state is TerminalState.COMPLETED
    assert worker.proc.poll() is None
