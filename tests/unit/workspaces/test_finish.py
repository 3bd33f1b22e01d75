"""finish: the session's changes become one commit on its branch; the worktree goes (B22)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces import Worktree, WorktreeManager
from nahida_workers.workspaces.git import COMMIT_AUTHOR
from tests.unit.workspaces.gitrepo import (
    NOTES,
    assert_main_untouched,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)


def _edit(tree: Worktree, line: str) -> None:
    with (tree.workspace / "NOTES.md").open("a") as notes:
        notes.write(line + "\n")


def test_finish_commits_every_change_on_the_branch_and_removes_the_worktree(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "edit by s-1")
    (tree.path / "new.txt").write_text("new\n")
    sha = manager.finish(tree, message="Append to NOTES.md")
    assert sha == sh(repo, "rev-parse", "nahida/s-1")
    assert sh(repo, "rev-parse", f"{sha}^") == tree.base  # exactly one commit
    assert sh(repo, "show", f"{sha}:NOTES.md") == (NOTES + "edit by s-1").strip()
    assert sh(repo, "show", f"{sha}:new.txt") == "new"
    author = sh(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha)
    assert author == "{0} <{1}>|{0} <{1}>".format(*COMMIT_AUTHOR)  # no git config here
    message = sh(repo, "log", "-1", "--format=%B", sha)
    assert message.startswith("Append to NOTES.md") and "Nahida-Session: s-1" in message
    assert not tree.path.exists()
    assert registered(repo) == []
    assert session_branches(repo) == ["nahida/s-1"]  # the branch holds the result
    assert prune_dry_run(repo) == ""
    assert_main_untouched(repo)


def test_finish_with_nothing_changed_returns_none_and_makes_no_commit(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    assert manager.finish(tree, message="nothing") is None
    assert sh(repo, "rev-parse", "nahida/s-1") == tree.base
    assert not tree.path.exists()


def test_finish_twice_returns_the_same_commit_and_makes_one(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "once")
    first = manager.finish(tree, message="once")
    assert manager.finish(tree, message="once") == first
    assert manager.finish(Worktree.from_dict(tree.to_dict()), message="once") == first
    assert sh(repo, "rev-list", "--count", f"{tree.base}..nahida/s-1") == "1"


def test_keep_leaves_the_worktree_and_a_later_finish_removes_it(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "kept")
    sha = manager.finish(tree, message="kept", keep=True)
    assert (tree.path / "NOTES.md").read_text().endswith("kept\n")
    assert sh(tree.path, "status", "--porcelain") == ""
    assert registered(repo) == [(str(tree.path), "refs/heads/nahida/s-1")]
    assert prune_dry_run(repo) == ""
    assert manager.finish(tree, message="kept") == sha
    assert registered(repo) == []


def test_the_keep_policy_comes_from_the_manager_when_not_given(repo: Path) -> None:
    manager = WorktreeManager(keep=True)
    tree = manager.ensure(repo, "s-1")
    manager.finish(tree, message="m")
    assert tree.path.is_dir()


def test_a_finish_killed_mid_removal_is_completed_by_the_next(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "done")
    sha = manager.finish(tree, message="done", keep=True)
    # Killed after renaming the directory aside, before the prune and delete.
    aside = tree.path.with_name(tree.path.name + ".nahida-removing-dead0000")
    os.rename(tree.path, aside)
    assert manager.finish(tree, message="done") == sha
    assert not aside.exists() and not tree.path.exists()
    assert registered(repo) == [] and prune_dry_run(repo) == ""
    assert sh(repo, "rev-list", "--count", f"{tree.base}..nahida/s-1") == "1"


def test_repository_hooks_do_not_run_in_the_launcher(
    manager: WorktreeManager, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    for hook in ("post-checkout", "pre-commit", "prepare-commit-msg", "commit-msg"):
        script = repo / ".git" / "hooks" / hook
        script.write_text(f"#!/bin/sh\necho {hook} >> {marker}\nexit 1\n")
        script.chmod(0o755)
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "x")
    assert manager.finish(tree, message="x") is not None
    assert not marker.exists()


def test_a_stale_index_lock_of_the_worktree_is_removed(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "after a host crash")
    lock = Path(sh(tree.path, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert manager.finish(tree, message="m") is not None


def test_a_live_index_lock_fails_after_the_retries_and_keeps_the_work(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    _edit(tree, "precious")
    lock = Path(sh(tree.path, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")  # fresh: a git process is using it
    with pytest.raises(WorktreeUnavailableError, match="after 3 retries"):
        manager.finish(tree, message="m")
    assert (tree.path / "NOTES.md").read_text().endswith("precious\n")
    lock.unlink()
    assert manager.finish(tree, message="m") is not None


def test_a_worktree_moved_off_its_branch_is_not_committed_nor_removed(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    sh(tree.path, "checkout", "-q", "-b", "agent-branch")
    _edit(tree, "elsewhere")
    with pytest.raises(WorktreeUnavailableError, match="agent-branch"):
        manager.finish(tree, message="m")
    assert tree.path.is_dir()
    assert sh(repo, "rev-parse", "nahida/s-1") == tree.base
