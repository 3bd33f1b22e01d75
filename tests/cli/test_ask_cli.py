"""``nahida ask`` on a real PostgreSQL with a session a real worker ran (issue 23 item 2)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.testing.fleet import Fleet, make_repo, wait_done
from tests.api.test_side_api import SCRIPT, ledger_rows, settle
from tests.cli.helpers import nahida_script

pytestmark = pytest.mark.slow


def _ask(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nahida_script(), "ask", *args],
        env={**os.environ, **fleet.env()},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ask_cli(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = SessionSpec.model_validate(
        {
            "prompt": "read the README",
            "tools": ["Read"],
            "provider": {"kind": "scripted", "script": SCRIPT},
        }
    )
    session, _ = fleet.dispatcher(pg).submit(spec, workspace=str(repo))
    sid = session.session_id
    fleet.start_worker(name="w")
    wait_done(pg, sid, timeout=60)
    settle(fleet, pg, sid)
    before = ledger_rows(pg, sid)
    done = _ask(fleet, sid[:10], "What did you read?")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "It read README.md, which says Demo.\n"
    assert "1 tool call(s) refused" in done.stderr and "recorded as " in done.stderr
    as_json = json.loads(_ask(fleet, sid, "again?", "--json").stdout)
    assert as_json["refused"] == [{"turn": 0, "call_id": "a1", "name": "Read"}]
    assert ledger_rows(pg, sid) == before
    for args, code, needle in (
        (["nosuch", "q"], 2, "no session"),
        ([sid, "  "], 2, "needs text"),
    ):
        bad = _ask(fleet, *args)
        lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
        assert bad.returncode == code and len(lines) == 1 and needle in lines[0], bad.stderr


def test_ask_local_after_a_local_batch(tmp_path: Path) -> None:
    from nahida_workers.ledger.sql import make_engine
    from tests.cli.helpers import SURVEY, nahida

    repo = make_repo(tmp_path / "repo")
    batch = nahida(["batch", str(SURVEY), "--local", "--repo", str(repo)], cwd=tmp_path)
    assert batch.code == 0, batch.output
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'nahida.sqlite3'}")
    ledger = SqlLedger(engine=engine)
    (session,) = ledger.sessions()
    before = [
        e.model_dump_json()
        for r in ledger.runs_of(session.session_id)
        for e in ledger.events(r.run_id)
    ]
    asked = nahida(["ask", session.session_id[:8], "What did you find?", "--local"], cwd=tmp_path)
    assert asked.code == 0, asked.output
    assert asked.stdout.startswith("From this session's transcript:")
    assert "1 tool call(s) refused" in asked.stderr
    after = [
        e.model_dump_json()
        for r in ledger.runs_of(session.session_id)
        for e in ledger.events(r.run_id)
    ]
    assert after == before
    engine.dispose()
