"""``isolation: worktree`` for top-level sessions (issue 23 item 6).

Two batches on one repository must never share a working tree: each
top-level session of a job asking ``isolation: worktree`` runs in its own
worktree on ``nahida/<session id>``, made by the same launcher as a
worktree child's (the repository lock, the recorded base, the result
branch).  A memory fleet over a real git repository, deliveries on threads
at once.  One test per rule.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.testing.doubles import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.gitrepo import (
    NOTES,
    make_demo_repo,
    no_git_config,
    registered,
    session_branches,
    sh,
)

EDIT = {
    "id": "edit",
    "name": "Bash",
    "arguments": {"command": 'echo "edit by $NAHIDA_SESSION_ID" >> NOTES.md'},
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    no_git_config(monkeypatch, tmp_path / "home")
    return make_demo_repo(tmp_path)


def editor(isolation: str = "worktree", turns: list[dict[str, Any]] | None = None) -> Any:
    spec = scripted_spec(
        turns or [{"tool_calls": [EDIT]}, {"text": "Edited NOTES.md."}], tools=["Bash"]
    )
    return SessionSpec.model_validate({**spec.model_dump(), "isolation": isolation})


def run_all(repo: Path, specs: list[Any], manager: WorktreeManager | None) -> tuple[Any, list[str]]:
    """Submit every spec on ``repo``, then run all their deliveries at once on threads."""
    runner = memory_runner()
    runner.worktrees = manager
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    ids = [dispatcher.submit(spec, workspace=str(repo))[0].session_id for spec in specs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(10):
            wave = [sid for sid, _ in queue.published]
            queue.published.clear()
            if not wave:
                break
            list(pool.map(runner.run, wave))
    return runner.ledger, ids


def terminal(ledger: Any, session_id: str) -> Any:
    (run,) = ledger.runs_of(session_id)
    return next(e for e in ledger.events(run.run_id) if e.type is EventType.TERMINAL)


def test_two_sessions_on_one_repository_each_get_their_own_worktree(repo: Path) -> None:
    base = sh(repo, "rev-parse", "HEAD")
    ledger, ids = run_all(repo, [editor(), editor()], WorktreeManager(sleep=lambda _s: None))
    assert len(set(ids)) == 2
    for sid in ids:
        event = terminal(ledger, sid)
        assert event.payload["state"] == "completed"
        branch = f"nahida/{sid}"
        assert event.payload["branch"] == branch
        assert event.payload["commit"] == sh(repo, "rev-parse", branch)  # the result branch
        assert sh(repo, "rev-list", "--count", f"{base}..{branch}") == "1"
        # Its own line only: the other session never wrote into its tree.
        assert sh(repo, "show", f"{branch}:NOTES.md") == (NOTES + f"edit by {sid}\n").strip()
    assert sorted(session_branches(repo)) == sorted(f"nahida/{s}" for s in ids)
    assert sh(repo, "status", "--porcelain") == "" and (repo / "NOTES.md").read_text() == NOTES
    assert registered(repo) == []  # cleanup: removed after the result commit


def test_shared_isolation_stays_in_the_workspace(repo: Path) -> None:
    ledger, (sid,) = run_all(repo, [editor("shared")], WorktreeManager())
    assert terminal(ledger, sid).payload["state"] == "completed"
    assert "commit" not in terminal(ledger, sid).payload
    assert session_branches(repo) == []
    assert (repo / "NOTES.md").read_text() == NOTES + f"edit by {sid}\n"


def test_a_session_that_changes_nothing_has_no_result_commit(repo: Path) -> None:
    ledger, (sid,) = run_all(repo, [editor(turns=[{"text": "Nothing to do."}])], WorktreeManager())
    payload = terminal(ledger, sid).payload
    assert payload["state"] == "completed" and payload["commit"] is None
    assert registered(repo) == []


def test_no_worktree_seals_failed_worktree_unavailable(tmp_path: Path) -> None:
    plain = tmp_path / "not-git"
    plain.mkdir()
    ledger, (sid,) = run_all(plain, [editor()], WorktreeManager())
    payload = terminal(ledger, sid).payload
    assert (payload["state"], payload["reason"]) == ("failed", "worktree_unavailable")
    assert not (plain / "NOTES.md").exists()  # never ran in the shared directory instead


def test_a_worker_without_a_manager_refuses_instead_of_sharing(repo: Path) -> None:
    ledger, (sid,) = run_all(repo, [editor()], None)
    assert terminal(ledger, sid).payload["reason"] == "worktree_unavailable"
    assert (repo / "NOTES.md").read_text() == NOTES


def test_a_later_run_continues_on_the_same_branch_and_base(repo: Path) -> None:
    from nahida_workers.runtime.dispatch.inbox import Inbox

    base = sh(repo, "rev-parse", "HEAD")
    edit = [{"tool_calls": [EDIT]}, {"text": "Edited NOTES.md."}]
    spec = scripted_spec(edit, tools=["Bash"])
    data = spec.model_dump()
    data["provider"]["script"]["next_runs"] = [edit]
    spec = SessionSpec.model_validate({**data, "isolation": "worktree"})
    runner = memory_runner()
    runner.worktrees = WorktreeManager()
    dispatcher = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock)
    sid = dispatcher.submit(spec, workspace=str(repo))[0].session_id
    runner.run(sid)
    sh(repo, "commit", "-q", "--allow-empty", "-m", "main moved on meanwhile")
    Inbox(runner.ledger, runner.leases, dispatcher, runner.clock).post(
        sid, "Once more, please.", next_turn=False
    )
    runner.run(sid)
    runs = runner.ledger.runs_of(sid)
    assert len(runs) == 2
    ends = [
        next(e for e in runner.ledger.events(r.run_id) if e.type is EventType.TERMINAL).payload
        for r in runs
    ]
    branch = f"nahida/{sid}"
    assert ends[1]["commit"] == sh(repo, "rev-parse", branch) != ends[0]["commit"]
    assert sh(repo, "rev-parse", f"{branch}~2") == base  # the recorded base, not main's new HEAD
    assert sh(repo, "show", f"{branch}:NOTES.md") == (NOTES + f"edit by {sid}\n" * 2).strip()
    assert registered(repo) == []
