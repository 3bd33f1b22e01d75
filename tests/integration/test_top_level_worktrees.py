"""Two top-level sessions on one repository at once, on real workers (issue 23 item 6).

Two sessions of a job with ``isolation: worktree`` (two batches on one
repository, in effect) run at the same time on two ``celery -A tasks
worker`` processes.  Each appends its own line to NOTES.md, waits, then
reads the file back: its tree must hold its line only.  Their Bash calls
must overlap in time (else this would not test sharing at all); each
result is committed on ``nahida/<session id>``; the main working tree is
untouched and no worktree is left registered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, submit, wait_for
from tests.integration.children_world import all_done, terminal_state
from tests.unit.workspaces.gitrepo import NOTES, make_demo_repo, registered, session_branches, sh

pytestmark = pytest.mark.slow

EDIT = {
    "id": "edit",
    "name": "Bash",
    "arguments": {
        "command": 'echo "edit by $NAHIDA_SESSION_ID" >> NOTES.md && sleep 2 && cat NOTES.md'
    },
}


def test_two_top_level_sessions_on_one_repository_never_share_a_tree(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_demo_repo(tmp_path)
    base = sh(repo, "rev-parse", "HEAD")
    for name in ("w1", "w2"):
        fleet.start_worker(name=name, concurrency=1, pool="threads")
    spec = scripted_spec([{"tool_calls": [EDIT]}, {"text": "Edited NOTES.md."}], tools=["Bash"])
    spec = SessionSpec.model_validate({**spec.model_dump(), "isolation": "worktree"})
    dispatcher = fleet.dispatcher(pg)
    ids = [submit(dispatcher, spec, repo) for _ in range(2)]
    wait_for(lambda: all_done(pg, ids), timeout=90, what="both sessions to finish")
    spans = []
    for sid in ids:
        assert terminal_state(pg, sid) == "completed"
        (run,) = pg.runs_of(sid)
        events = pg.events(run.run_id)
        (result,) = [e for e in events if e.type is EventType.TOOL_RESULT]
        shown = str(result.payload["content"]).split("stdout:", 1)[1].strip()
        assert shown == (NOTES + f"edit by {sid}").strip()  # its own line, nobody else's
        (receipt,) = pg.receipts(run.run_id)
        spans.append((receipt.started_at, receipt.finished_at))
        (end,) = [e for e in events if e.type is EventType.TERMINAL]
        branch = f"nahida/{sid}"
        assert end.payload["branch"] == branch
        assert end.payload["commit"] == sh(repo, "rev-parse", branch)
        assert sh(repo, "rev-parse", f"{branch}^") == base
        assert sh(repo, "show", f"{branch}:NOTES.md") == (NOTES + f"edit by {sid}\n").strip()
    (a_start, a_end), (b_start, b_end) = spans
    assert a_start < b_end and b_start < a_end, f"the two edits did not overlap: {spans}"
    assert sorted(session_branches(repo)) == sorted(f"nahida/{s}" for s in ids)
    assert sh(repo, "status", "--porcelain") == "" and (repo / "NOTES.md").read_text() == NOTES
    assert registered(repo) == []
