"""ensure: one worktree per session, idempotent, repaired after crashes (case B22)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.conftest import Sleeps
from tests.unit.workspaces.gitrepo import (
    NOTES,
    assert_main_untouched,
    commit_file,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)


def test_a_session_gets_its_own_worktree_on_its_branch_at_the_base(
    manager: WorktreeManager, repo: Path, tmp_path: Path
) -> None:
    base = sh(repo, "rev-parse", "HEAD")
    tree = manager.ensure(repo, "s-b22-c1")
    assert tree.branch == "nahida/s-b22-c1"
    assert tree.base == base
    # Default placement: beside the repository, outside its working tree.
    assert tree.path == tmp_path / ".nahida-worktrees" / "demo-repo" / "s-b22-c1"
    assert tree.workspace == tree.path
    assert sh(tree.path, "symbolic-ref", "HEAD") == "refs/heads/nahida/s-b22-c1"
    assert sh(tree.path, "rev-parse", "HEAD") == base
    assert (tree.path / "NOTES.md").read_text() == NOTES
    assert sh(repo, "rev-parse", "refs/nahida/base/s-b22-c1") == base
    assert registered(repo) == [(str(tree.path), "refs/heads/nahida/s-b22-c1")]
    assert_main_untouched(repo)
    assert prune_dry_run(repo) == ""


def test_a_second_ensure_returns_the_same_worktree_with_its_work(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    (tree.path / "wip.txt").write_text("uncommitted\n")
    again = manager.ensure(repo, "s-1", base=tree.base)
    assert again == tree
    assert (again.path / "wip.txt").read_text() == "uncommitted\n"
    assert session_branches(repo) == ["nahida/s-1"]
    assert len(registered(repo)) == 1


def test_the_base_of_the_first_attempt_is_kept_after_a_crash_and_a_new_head(
    repo: Path, sleeps: Sleeps
) -> None:
    first_head = sh(repo, "rev-parse", "HEAD")

    def crash(session_id: str) -> None:
        raise KeyboardInterrupt  # the process dies between branch and worktree

    with pytest.raises(KeyboardInterrupt):
        WorktreeManager(sleep=sleeps, on_branch_created=crash).ensure(repo, "s-1")
    assert session_branches(repo) == ["nahida/s-1"]
    assert registered(repo) == []
    commit_file(repo, "later.txt", "later\n")  # main moves on meanwhile

    tree = WorktreeManager(sleep=sleeps).ensure(repo, "s-1")
    assert tree.base == first_head
    assert sh(tree.path, "rev-parse", "HEAD") == first_head
    assert session_branches(repo) == ["nahida/s-1"]
    assert len(registered(repo)) == 1


def test_an_explicit_base_is_used_and_a_different_one_later_is_refused(
    manager: WorktreeManager, repo: Path
) -> None:
    old = sh(repo, "rev-parse", "HEAD")
    new = commit_file(repo, "b.txt", "b\n")
    tree = manager.ensure(repo, "s-1", base=old[:12])
    assert tree.base == old
    assert sh(tree.path, "rev-parse", "HEAD") == old
    with pytest.raises(WorktreeUnavailableError, match="was based on"):
        manager.ensure(repo, "s-1", base=new)
    assert registered(repo) == [(str(tree.path), "refs/heads/nahida/s-1")]


def test_a_branch_left_at_the_base_is_attached_to_not_recreated(
    manager: WorktreeManager, repo: Path
) -> None:
    # What B22's losers left: the branch, no worktree; `worktree add -b` would
    # now fail with "a branch named ... already exists".
    sh(repo, "branch", "--no-track", "nahida/s-1")
    tree = manager.ensure(repo, "s-1")
    assert sh(tree.path, "symbolic-ref", "HEAD") == "refs/heads/nahida/s-1"
    assert session_branches(repo) == ["nahida/s-1"]
    assert len(registered(repo)) == 1
    assert_main_untouched(repo)


def test_a_branch_holding_the_sessions_earlier_work_is_attached_to(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    (tree.path / "NOTES.md").write_text(NOTES + "run 1\n")
    result = manager.finish(tree, message="run 1")
    assert result is not None and not tree.path.exists()
    again = manager.ensure(repo, "s-1")  # the session's next run
    assert sh(again.path, "rev-parse", "HEAD") == result
    assert again.base == tree.base


def test_a_branch_that_does_not_descend_from_the_base_is_refused_untouched(
    manager: WorktreeManager, repo: Path
) -> None:
    base = sh(repo, "rev-parse", "HEAD")
    sh(repo, "checkout", "-q", "--orphan", "elsewhere")
    sh(repo, "rm", "-q", "-rf", ".")
    other = commit_file(repo, "x.txt", "x\n")
    sh(repo, "checkout", "-q", "main")
    sh(repo, "branch", "nahida/s-1", other)
    with pytest.raises(WorktreeUnavailableError, match="does not descend"):
        manager.ensure(repo, "s-1", base=base)
    assert sh(repo, "rev-parse", "nahida/s-1") == other
    assert registered(repo) == []


def test_a_stale_registration_is_pruned_before_the_add(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    shutil.rmtree(tree.path)  # the directory vanished; git still lists it
    assert prune_dry_run(repo) != ""
    again = manager.ensure(repo, "s-1")
    assert again.path == tree.path and (again.path / "NOTES.md").exists()
    assert prune_dry_run(repo) == ""
    assert len(registered(repo)) == 1


def test_a_worktree_add_killed_mid_checkout_is_redone(manager: WorktreeManager, repo: Path) -> None:
    path = manager.path_for(repo, "s-1")
    sh(repo, "branch", "--no-track", "nahida/s-1")
    # The state `git worktree add` leaves when killed mid-checkout: registered,
    # still locked "initializing" (so `worktree prune` keeps it), files missing.
    sh(repo, "worktree", "add", "-q", "--lock", "--reason", "initializing", str(path), "nahida/s-1")
    (path / "NOTES.md").unlink()
    tree = manager.ensure(repo, "s-1")
    assert (tree.path / "NOTES.md").read_text() == NOTES
    assert sh(tree.path, "status", "--porcelain") == ""
    assert "locked" not in sh(repo, "worktree", "list", "--porcelain")
    assert len(registered(repo)) == 1


def test_debris_at_the_worktree_path_is_cleared(manager: WorktreeManager, repo: Path) -> None:
    path = manager.path_for(repo, "s-1")
    path.mkdir(parents=True)
    (path / "junk").write_text("left by an interrupted attempt\n")
    tree = manager.ensure(repo, "s-1")
    assert not (tree.path / "junk").exists()
    assert (tree.path / "NOTES.md").exists()


def test_a_worktree_moved_off_its_branch_is_refused_and_kept(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    sh(tree.path, "checkout", "-q", "-b", "agent-branch")
    (tree.path / "work.txt").write_text("keep me\n")
    with pytest.raises(WorktreeUnavailableError, match="agent-branch"):
        manager.ensure(repo, "s-1")
    assert (tree.path / "work.txt").read_text() == "keep me\n"


def test_a_session_branch_checked_out_in_the_main_tree_is_refused(
    manager: WorktreeManager, repo: Path
) -> None:
    sh(repo, "checkout", "-q", "-b", "nahida/s-1")
    with pytest.raises(WorktreeUnavailableError, match="not a session worktree"):
        manager.ensure(repo, "s-1")
    assert (repo / "NOTES.md").exists()


def test_a_transient_git_lock_error_is_retried_with_backoff(repo: Path, sleeps: Sleeps) -> None:
    # A ref lock held by another git process: `git branch` fails with
    # "cannot lock ref ... File exists" until that process lets go.
    lock = repo / ".git" / "refs" / "heads" / "nahida" / "s-1.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")

    def other_process_lets_go(seconds: float) -> None:
        sleeps.append(seconds)
        lock.unlink(missing_ok=True)

    tree = WorktreeManager(sleep=other_process_lets_go).ensure(repo, "s-1")
    assert len(sleeps) == 1 and 0.05 <= sleeps[0] <= 0.1
    assert session_branches(repo) == ["nahida/s-1"]
    assert registered(repo) == [(str(tree.path), "refs/heads/nahida/s-1")]


def test_threads_of_one_process_are_serialized_too(repo: Path) -> None:
    manager = WorktreeManager()
    trees: dict[str, Path] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def child(session_id: str) -> None:
        start.wait()
        try:
            trees[session_id] = manager.ensure(repo, session_id).path
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=child, args=(f"t-{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(trees.values())) == 6
    assert len(registered(repo)) == 6
    assert_main_untouched(repo)


def test_a_registration_half_written_by_another_add_is_waited_out(
    repo: Path, sleeps: Sleeps
) -> None:
    # Another process's `git worktree add` between creating its commondir file
    # and writing it: every `git worktree list/prune` fails "failed to read
    # .git/worktrees/half/commondir" (B22's --no-track failure) until it is done.
    half = repo / ".git" / "worktrees" / "half"
    half.mkdir(parents=True)
    (half / "locked").write_text("initializing")  # written first, so prune keeps it
    (half / "gitdir").write_text(str(repo.parent / "half" / ".git") + "\n")
    (half / "commondir").write_text("")

    def other_add_finishes(seconds: float) -> None:
        sleeps.append(seconds)
        shutil.rmtree(half, ignore_errors=True)

    tree = WorktreeManager(sleep=other_add_finishes).ensure(repo, "s-1")
    assert len(sleeps) == 1
    assert registered(repo) == [(str(tree.path), "refs/heads/nahida/s-1")]


def test_duplicate_deliveries_of_one_session_share_one_worktree(repo: Path) -> None:
    manager = WorktreeManager()
    trees = []
    start = threading.Barrier(4)

    def delivery() -> None:
        start.wait()
        trees.append(manager.ensure(repo, "same"))

    threads = [threading.Thread(target=delivery) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(trees) == 4 and len(set(trees)) == 1
    assert session_branches(repo) == ["nahida/same"]
    assert len(registered(repo)) == 1
