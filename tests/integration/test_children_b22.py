"""Case B22 through sessions: six worktree children of two parents on two processes.

Two parents each start three ``isolation: worktree`` editor children that
append to the same NOTES.md; two ``celery -A tasks worker`` processes run
them, so the launchers making the worktrees race across processes (the
repository's file lock serializes them, ``workspaces/lock.py``).  Each
child's change is committed on its own branch ``nahida/<child id>``; the
main working tree is untouched (DESIGN.md section 8, issue 13 item 6).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, submit, wait_for
from tests.integration.children_world import (
    adopted_once_in_order,
    all_done,
    scripted,
    task,
    terminal_state,
)
from tests.unit.workspaces.gitrepo import (
    NOTES,
    make_demo_repo,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)

pytestmark = pytest.mark.slow

CALLS = ["call_e1", "call_e2", "call_e3"]
EDIT = {
    "id": "edit",
    "name": "Bash",
    "arguments": {"command": 'echo "edit by $NAHIDA_SESSION_ID" >> NOTES.md'},
}


def test_b22_six_worktree_children_of_two_parents_on_two_processes(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_demo_repo(tmp_path)
    base = sh(repo, "rev-parse", "HEAD")
    for name in ("w1", "w2"):
        fleet.start_worker(name=name, concurrency=3, pool="threads")
    spec = scripted_spec(
        [
            {
                "text": "Three parallel edits.",
                "tool_calls": [task(c, "editor", isolation="worktree") for c in CALLS],
            },
            {"text": "All edits done."},
        ],
        tools=["Task"],
        agents={
            "editor": scripted([{"tool_calls": [EDIT]}, {"text": "Edited NOTES.md."}], ["Bash"])
        },
    )
    dispatcher = fleet.dispatcher(pg)
    parents = [submit(dispatcher, spec, repo) for _ in range(2)]
    wait_for(lambda: all_done(pg, parents), timeout=60, what="both parents to finish")
    kids = []
    for parent in parents:
        assert terminal_state(pg, parent) == "completed"
        results = adopted_once_in_order(pg, parent, CALLS)
        assert [e.payload["status"] for e in results] == ["ok"] * 3
        (run,) = pg.runs_of(parent)
        receipts = {r.call_id: r for r in pg.receipts(run.run_id)}
        for call in CALLS:
            kid = child_id(run.run_id, call)
            kids.append(kid)
            assert terminal_state(pg, kid) == "completed"
            branch = f"nahida/{kid}"
            assert receipts[call].evidence["commit"] == sh(repo, "rev-parse", branch)
            assert sh(repo, "rev-list", "--count", f"{base}..{branch}") == "1"
            assert sh(repo, "rev-parse", f"{branch}^") == base
            assert sh(repo, "show", f"{branch}:NOTES.md") == (NOTES + f"edit by {kid}\n").strip()
    assert len(set(kids)) == 6
    assert sorted(session_branches(repo)) == sorted(f"nahida/{k}" for k in kids)
    assert sh(repo, "status", "--porcelain") == ""  # the main working tree is untouched
    assert (repo / "NOTES.md").read_text() == NOTES
    assert registered(repo) == []  # removed at the end (keep: false)
    assert prune_dry_run(repo) == ""
    assert "branch.nahida" not in sh(repo, "config", "--list")
