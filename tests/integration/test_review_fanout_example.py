"""The example job ``config/jobs/review-fanout.yaml`` on a real fleet with ONE session slot.

DESIGN.md section 8, issue 13 item 8.  The job's parent starts one
foreground child per area of a repository (tests, docs, packaging, source);
the children read real files with read-only tools.  On a worker started as
``celery -A tasks worker -Q sessions -c 1`` (prefork, one slot; a tools
worker runs the remote Read and Grep calls, as in case B15) the parent
must park (``waiting``, recorded as a ``parked`` control event) while its
children run, and adopt their answers once each, in call order.  The
repository is a corpus repository when ``corpus/`` was fetched, else a small
fixture repository shaped like one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.spec import load_job
from nahida_workers.testing.fleet import Fleet, make_repo, submit

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "config" / "jobs" / "review-fanout.yaml"
AREAS = ["area_tests", "area_docs", "area_packaging", "area_source"]
ANSWERS = ["Tests reviewed", "Docs reviewed", "Packaging reviewed", "Source reviewed"]

FIXTURE = {
    "README.md": "# demo-pkg\n\nA small package.\n",
    "PKG-INFO": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\nRequires-Python: >=3.9\n",
    "pyproject.toml": '[project]\nname = "demo-pkg"\nversion = "1.0"\n',
    "docs/index.rst": "demo-pkg\n========\n",
    "src/demo_pkg/__init__.py": "class Demo:\n    pass\n",
    "tests/test_demo.py": "def test_demo():\n    assert True\n",
}


def _repository(tmp_path: Path) -> Path:
    listed = ROOT / "corpus" / "repos.txt"
    if listed.is_file():
        for line in listed.read_text().splitlines():
            path = Path(line.strip())
            path = path if path.is_absolute() else ROOT / path
            if line.strip() and path.is_dir():
                return path
    return make_repo(tmp_path / "demo-pkg", FIXTURE)


def test_review_fanout_completes_on_one_session_slot(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = _repository(tmp_path)
    fleet.start_worker(concurrency=1, pool="prefork")  # ONE session slot
    fleet.start_worker(queues="tools", concurrency=2, name="t1")  # Read/Grep run remote
    spec = load_job(JOB).session_spec()
    parent = submit(fleet.dispatcher(pg), spec, repo)
    statuses: list[tuple[SessionStatus, bool]] = []  # (parent status, a child unfinished)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        session = pg.get_session(parent)
        assert session is not None
        kids = child_ledger(pg).children(parent)
        statuses.append((session.status, any(k.status is not SessionStatus.DONE for k in kids)))
        if session.status is SessionStatus.DONE:
            break
        time.sleep(0.05)
    if not statuses or statuses[-1][0] is not SessionStatus.DONE:
        kids = child_ledger(pg).children(parent)
        logs = "\n".join(w.text()[-3000:] for w in fleet.workers)
        pytest.fail(
            f"parent not done: {statuses[-3:]}, children {[k.status for k in kids]}\n{logs}"
        )
    run = pg.runs_of(parent)[-1]
    events = pg.events(run.run_id)
    assert events[-1].type is EventType.TERMINAL and events[-1].payload["state"] == "completed"
    # the ledger shows the parent waiting while its children ran
    assert (SessionStatus.WAITING, True) in statuses
    parked = [
        e for e in events if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
    ]
    assert parked and set(parked[0].payload["calls"]) <= set(AREAS)
    # one child per area, all completed; each adopted once, in call order
    kids = child_ledger(pg).children(parent)
    assert sorted(k.session_id for k in kids) == sorted(child_id(run.run_id, a) for a in AREAS)
    results = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == AREAS
    for result, answer in zip(results, ANSWERS, strict=True):
        assert result.payload["status"] == "ok" and result.payload["content"].startswith(answer)
    # the children read real files of the repository
    for area in AREAS:
        kid_run = pg.runs_of(child_id(run.run_id, area))[-1]
        assert kid_run.terminal_state is not None and kid_run.terminal_state.value == "completed"
        reads = [r for r in pg.receipts(kid_run.run_id) if r.tool_name in ("Read", "Glob")]
        assert reads and all(r.status.value == "ok" for r in reads)
