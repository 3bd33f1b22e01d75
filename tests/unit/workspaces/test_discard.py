"""discard and orphans: throwing a session's worktree away; finding branches without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nahida_workers.workspaces import WorktreeManager
from tests.unit.workspaces.gitrepo import (
    assert_main_untouched,
    prune_dry_run,
    registered,
    session_branches,
    sh,
)


def test_discard_removes_the_worktree_the_branch_and_the_base_ref(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    keep = manager.ensure(repo, "s-2")
    (tree.path / "NOTES.md").write_text("thrown away\n")
    manager.discard(repo, "s-1")
    assert not tree.path.exists()
    assert session_branches(repo) == ["nahida/s-2"]
    assert sh(repo, "for-each-ref", "--format=%(refname)", "refs/nahida/") == (
        "refs/nahida/base/s-2"
    )
    assert registered(repo) == [(str(keep.path), "refs/heads/nahida/s-2")]
    assert prune_dry_run(repo) == ""
    assert_main_untouched(repo)


def test_discard_is_idempotent_and_a_no_op_for_an_unknown_session(
    manager: WorktreeManager, repo: Path
) -> None:
    manager.ensure(repo, "s-1")
    manager.discard(repo, "s-1")
    manager.discard(repo, "s-1")
    manager.discard(repo, "never-seen")
    assert session_branches(repo) == [] and registered(repo) == []


def test_discard_of_a_worktree_whose_directory_vanished(
    manager: WorktreeManager, repo: Path
) -> None:
    tree = manager.ensure(repo, "s-1")
    shutil.rmtree(tree.path)
    manager.discard(repo, "s-1")
    assert session_branches(repo) == [] and prune_dry_run(repo) == ""


def test_discard_never_removes_the_main_working_tree(manager: WorktreeManager, repo: Path) -> None:
    from nahida_workers.errors import WorktreeUnavailableError

    sh(repo, "checkout", "-q", "-b", "nahida/s-1")
    with pytest.raises(WorktreeUnavailableError, match="not discarded"):
        manager.discard(repo, "s-1")
    assert (repo / "NOTES.md").exists()


def test_orphans_tells_debris_from_results_and_skips_live_worktrees(
    manager: WorktreeManager, repo: Path
) -> None:
    live = manager.ensure(repo, "live")
    done = manager.ensure(repo, "done")
    (done.path / "NOTES.md").write_text("result\n")
    result = manager.finish(done, message="result")

    def crash(session_id: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # a creation killed after `git branch`
        WorktreeManager(on_branch_created=crash).ensure(repo, "debris")
    sh(repo, "branch", "--no-track", "nahida/by-hand")  # no base ref: work unknown

    everything = {b.session_id: b for b in manager.branches(repo)}
    assert everything["live"].worktree == live.path
    orphans = {b.session_id: b for b in manager.orphans(repo)}
    assert set(orphans) == {"done", "debris", "by-hand"}
    assert orphans["done"].has_work and orphans["done"].tip == result
    assert orphans["done"].base == done.base
    assert not orphans["debris"].has_work and orphans["debris"].branch == "nahida/debris"
    assert orphans["by-hand"].has_work and orphans["by-hand"].base is None

    manager.discard(repo, "debris")
    assert {b.session_id for b in manager.orphans(repo)} == {"done", "by-hand"}
