"""Code that runs inside the spawned worker processes of test_worktrees_race.py.

Kept apart from the test module so a spawned process imports only this, the
worktree package and the git helpers (not the suite's conftest, with its
database drivers): the processes start in a fraction of the time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.gitrepo import sh

__all__ = ["create_and_hang", "edit_line", "worker"]


def edit_line(session_id: str) -> str:
    # The editor profile's one Bash call in B22: echo "edit by $NAHIDA_SESSION_ID" >> NOTES.md
    return f"edit by {session_id}\n"


def one_child(repo: Path, session_id: str, base: str) -> dict[str, Any]:
    """A B22 editor child: get a worktree, append its own line, finish."""
    failures: list[str] = []  # every git failure that was retried
    manager = WorktreeManager(on_retry=lambda exc: failures.append(str(exc)))
    tree = manager.ensure(repo, session_id, base=base)
    head = sh(tree.path, "rev-parse", "HEAD")
    with (tree.workspace / "NOTES.md").open("a") as notes:
        notes.write(edit_line(session_id))
    sha = manager.finish(tree, message=f"Append line to NOTES.md ({session_id})")
    return {"tree": tree.to_dict(), "head_at_create": head, "sha": sha, "retried": failures}


def worker(repo: Path, rounds: list[list[str]], base: str, start: Any, results: Any) -> None:
    """One worker process: per round, its children start together on threads."""

    def child(sid: str) -> None:
        try:
            results.put({"sid": sid, **one_child(repo, sid, base)})
        except BaseException as exc:  # reported to the test, asserted there
            results.put({"sid": sid, "error": repr(exc)})

    for session_ids in rounds:
        start.wait()
        threads = [threading.Thread(target=child, args=(sid,)) for sid in session_ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def create_and_hang(repo: Path, session_id: str, ready: Any) -> None:
    """Create a worktree, but stop for ever right after the branch exists (to be SIGKILLed)."""

    def pause(sid: str) -> None:
        ready.set()  # the branch exists; the worktree is not registered yet
        threading.Event().wait()

    WorktreeManager(on_branch_created=pause).ensure(repo, session_id)


def hold_lock(repo: Path, held: Any, release: Any) -> None:
    """Hold the repository's worktree lock (as another worker's launcher would) until told."""
    from nahida_workers.workspaces import open_repository
    from nahida_workers.workspaces.lock import repository_lock

    with repository_lock(open_repository(repo).common_dir, timeout_s=30):
        held.set()
        release.wait(timeout=60)


def create_with_slow_checkout(repo: Path, session_id: str, started: str, done: str) -> None:
    """Create a worktree whose checkout runs a slow smudge filter (touches markers).

    The filter is configured for this process only (``GIT_CONFIG_*``), so the
    test process checks the same files out at full speed.
    """
    import os

    os.environ.update(
        {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "filter.slow.smudge",
            "GIT_CONFIG_VALUE_0": f"touch {started} && sleep 1 && cat && touch {done}",
        }
    )
    WorktreeManager().ensure(repo, session_id)
