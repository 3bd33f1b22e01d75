"""B22 variant_create_fails: bounded retries, then worktree_unavailable, nothing left behind."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from nahida_workers.core.events import FailureCode, ReasonCode
from nahida_workers.errors import RunError, WorktreeUnavailableError
from nahida_workers.workspaces import WorktreeManager
from nahida_workers.workspaces.lock import LOCK_FILE_NAME
from tests.unit.workspaces.conftest import Sleeps
from tests.unit.workspaces.gitrepo import (
    assert_main_untouched,
    commit_file,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)


def _unwritable_root(tmp_path: Path) -> Path:
    # A regular file where the root directory should be: `git worktree add`
    # fails on every attempt, even as root (a read-only mode would not stop root).
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    return blocker


def test_worktree_add_failing_every_time_raises_after_three_retries_and_deletes_the_branch(
    repo: Path, tmp_path: Path, sleeps: Sleeps
) -> None:
    manager = WorktreeManager(root=_unwritable_root(tmp_path), sleep=sleeps)
    with pytest.raises(WorktreeUnavailableError, match="after 3 retries") as caught:
        manager.ensure(repo, "s-b22-e3")
    error = caught.value
    assert isinstance(error, RunError) and error.retryable is False
    assert error.failure_code is FailureCode.WORKTREE_UNAVAILABLE
    assert ReasonCode("worktree_unavailable") is ReasonCode.WORKTREE_UNAVAILABLE
    assert "not-a-directory" in str(error.__cause__)
    assert len(sleeps) == 3  # four attempts: the first and three retries
    assert sleeps == sorted(sleeps)  # backoff grows
    # The half-created branch (and its base record) is deleted; nothing else remains.
    assert session_branches(repo) == []
    assert sh(repo, "for-each-ref", "refs/nahida/") == ""
    assert registered(repo) == [] and prune_dry_run(repo) == ""
    assert_main_untouched(repo)


def test_a_failed_creation_never_deletes_a_branch_that_holds_work(
    repo: Path, tmp_path: Path, sleeps: Sleeps
) -> None:
    tree = WorktreeManager(sleep=sleeps).ensure(repo, "s-1")
    commit_file(tree.path, "work.txt", "earlier run\n")
    WorktreeManager(sleep=sleeps).finish(tree, message="run 1")
    work = sh(repo, "rev-parse", "nahida/s-1")
    manager = WorktreeManager(root=_unwritable_root(tmp_path), sleep=sleeps)
    with pytest.raises(WorktreeUnavailableError):
        manager.ensure(repo, "s-1")
    assert sh(repo, "rev-parse", "nahida/s-1") == work


def test_zero_retries_means_one_attempt(repo: Path, tmp_path: Path, sleeps: Sleeps) -> None:
    manager = WorktreeManager(root=_unwritable_root(tmp_path), retries=0, sleep=sleeps)
    with pytest.raises(WorktreeUnavailableError, match="after 0 retries"):
        manager.ensure(repo, "s-1")
    assert sleeps == [] and session_branches(repo) == []


def test_a_lock_held_too_long_fails_clearly(repo: Path) -> None:
    fd = os.open(repo / ".git" / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's launcher, stuck
        manager = WorktreeManager(lock_timeout_s=0.2)
        with pytest.raises(WorktreeUnavailableError, match=r"held for more than 0\.2 s"):
            manager.ensure(repo, "s-1")
    finally:
        os.close(fd)
    assert WorktreeManager().ensure(repo, "s-1").path.is_dir()


def test_no_git_on_the_worker_is_a_worktree_failure(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(WorktreeUnavailableError, match="git is not installed"):
        WorktreeManager().ensure(repo, "s-1")
