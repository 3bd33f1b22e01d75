"""``isolation: worktree`` children through real sessions (issue 13 item 6, case B22).

A memory fleet over a real git repository (B22's demo clone): the lead
starts three editor children with ``isolation: worktree``; their deliveries
run on threads at once, each appending to NOTES.md with Bash.  Each branch
``nahida/<child id>`` must hold its own commit with its own line, the main
working tree must stay clean, and the receipts must name the commits.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.spec import load_job
from nahida_workers.testing.doubles import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.workspaces import WorktreeManager
from tests.unit.runtime.test_children import results
from tests.unit.workspaces.gitrepo import (
    NOTES,
    make_demo_repo,
    no_git_config,
    registered,
    session_branches,
    sh,
)

RUN = "leadrun1"


def edit_call(i: int) -> dict[str, Any]:
    return {
        "id": f"call_e{i}",
        "name": "Task",
        "arguments": {
            "description": f"Append line {i} to NOTES.md",
            "prompt": f"Append line {i} to NOTES.md.",
            "agent": "editor",
            "mode": "foreground",
            "isolation": "worktree",
        },
    }


EDITOR = {
    "tools": ["Bash"],
    "provider": {
        "kind": "scripted",
        "script": {
            "turns": [
                {
                    "tool_calls": [
                        {
                            "id": "edit",
                            "name": "Bash",
                            "arguments": {
                                "command": 'echo "edit by $NAHIDA_SESSION_ID" >> NOTES.md'
                            },
                        }
                    ]
                },
                {"text": "Edited NOTES.md."},
            ]
        },
    },
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    no_git_config(monkeypatch, tmp_path / "home")
    return make_demo_repo(tmp_path)


def run_fleet(
    repo: Path, manager: WorktreeManager, n: int = 3, spec: Any = None
) -> tuple[Any, str]:
    """Submit the lead, then run every queued delivery, all of a wave at once on threads."""
    runner = memory_runner()
    runner.worktrees = manager
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    spec = spec or scripted_spec(
        [
            {"text": "Parallel edits.", "tool_calls": [edit_call(i) for i in range(1, n + 1)]},
            {"text": "All edits done."},
        ],
        tools=["Task"],
        agents={"editor": EDITOR},
    )
    session, _ = dispatcher.submit(spec, workspace=str(repo), run_id=RUN)
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(20):
            wave = [sid for sid, _ in queue.published]
            queue.published.clear()
            if not wave:
                break
            list(pool.map(runner.run, wave))
    return runner.ledger, session.session_id


def test_three_worktree_children_edit_the_same_file_in_parallel(repo: Path) -> None:
    base = sh(repo, "rev-parse", "HEAD")
    ledger, lead = run_fleet(repo, WorktreeManager(sleep=lambda _s: None))
    kids = [child_id(RUN, f"call_e{i}") for i in (1, 2, 3)]
    assert {k.session_id for k in child_ledger(ledger).children(lead)} == set(kids)
    adopted = results(ledger, lead)
    assert [e.payload["status"] for e in adopted] == ["ok"] * 3
    receipts = {r.call_id: r for r in ledger.receipts(RUN)}
    for i, kid in enumerate(kids, start=1):
        branch = f"nahida/{kid}"
        sha = sh(repo, "rev-parse", branch)
        assert receipts[f"call_e{i}"].evidence["commit"] == sha
        assert sh(repo, "rev-list", "--count", f"{base}..{branch}") == "1"
        assert sh(repo, "rev-parse", f"{branch}^") == base
        assert sh(repo, "show", f"{branch}:NOTES.md") == (NOTES + f"edit by {kid}\n").strip()
    assert sorted(session_branches(repo)) == sorted(f"nahida/{k}" for k in kids)
    assert sh(repo, "status", "--porcelain") == ""  # the main working tree is untouched
    assert (repo / "NOTES.md").read_text() == NOTES
    assert registered(repo) == []  # removed (keep: false)
    assert sh(repo, "worktree", "prune", "--dry-run") == ""
    assert "branch.nahida" not in sh(repo, "config", "--list")
    last = ledger.events(RUN)[-1].payload
    assert last["state"] == "completed"


def test_a_worktree_that_cannot_be_made_fails_the_child_and_the_parent_adopts_an_error(
    repo: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"  # git worktree add fails on every attempt
    blocker.write_text("")
    manager = WorktreeManager(root=blocker, sleep=lambda _s: None)
    ledger, lead = run_fleet(repo, manager, n=1)
    kid = child_id(RUN, "call_e1")
    end = ledger.events(ledger.runs_of(kid)[-1].run_id)[-1].payload
    assert (end["state"], end["reason"]) == ("failed", "worktree_unavailable")
    adopted = results(ledger, lead)
    assert adopted[0].payload["status"] == "error"
    assert "failed/worktree_unavailable" in adopted[0].payload["content"]
    assert ledger.get_session(lead).status.value == "done"  # never left waiting
    assert session_branches(repo) == []  # the half-created branch was deleted
    assert sh(repo, "status", "--porcelain") == ""


def test_worktree_isolation_on_a_plain_directory_is_refused_clearly(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    ledger, lead = run_fleet(plain, WorktreeManager(sleep=lambda _s: None), n=1)
    adopted = results(ledger, lead)
    assert adopted[0].payload["status"] == "error"
    assert "isolation 'worktree' is not possible here" in adopted[0].payload["content"]
    assert child_ledger(ledger).children(lead) == []


def test_the_review_fanout_worktrees_job_commits_one_note_per_branch(repo: Path) -> None:
    job = load_job(Path(__file__).parents[3] / "config/jobs/review-fanout-worktrees.yaml")
    ledger, _lead = run_fleet(repo, WorktreeManager(sleep=lambda _s: None), spec=job.session_spec())
    assert ledger.events(RUN)[-1].payload["state"] == "completed"
    receipts = {r.call_id: r for r in ledger.receipts(RUN)}
    for call in ("review_tests", "review_docs"):
        kid = child_id(RUN, call)
        assert receipts[call].evidence["commit"] == sh(repo, "rev-parse", f"nahida/{kid}")
        note = sh(repo, "show", f"nahida/{kid}:REVIEW_NOTES.md")
        assert note.startswith(f"- review by {kid}:") and len(note.splitlines()) == 1
    assert sh(repo, "status", "--porcelain") == ""
