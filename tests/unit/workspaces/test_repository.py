"""Refuse clearly when a workspace is not there or not git (issue 13 item 6)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nahida_workers.errors import ConfigError, UserError, WorkspaceUnavailableError
from nahida_workers.workspaces import WorktreeManager, open_repository
from tests.unit.workspaces.gitrepo import assert_main_untouched, sh


def _refused(manager: WorktreeManager, workspace: Path, code: str) -> WorkspaceUnavailableError:
    with pytest.raises(WorkspaceUnavailableError) as caught:
        manager.ensure(workspace, "s-1")
    assert caught.value.code == code
    assert isinstance(caught.value, UserError)
    return caught.value


def test_a_missing_workspace_is_refused_naming_the_reachability_rule(
    manager: WorktreeManager, tmp_path: Path
) -> None:
    error = _refused(manager, tmp_path / "not-here", "workspace_missing")
    assert "does not exist" in str(error)
    assert "reachable by the worker that runs the session" in str(error)


def test_a_file_is_not_a_workspace(manager: WorktreeManager, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in str(_refused(manager, tmp_path / "file", "workspace_missing"))


def test_a_plain_directory_is_not_a_git_repository(
    manager: WorktreeManager, tmp_path: Path
) -> None:
    (tmp_path / "plain").mkdir()
    _refused(manager, tmp_path / "plain", "not_a_git_repository")
    assert not (tmp_path / ".nahida-worktrees").exists()


def test_a_bare_repository_and_a_git_dir_are_not_working_trees(
    manager: WorktreeManager, repo: Path, tmp_path: Path
) -> None:
    _refused(manager, tmp_path / "demo-origin.git", "not_a_git_repository")
    _refused(manager, repo / ".git", "not_a_git_repository")


def test_a_repository_with_no_commits_is_refused_and_nothing_is_created(
    manager: WorktreeManager, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", "-b", "main", str(empty)], check=True)
    error = _refused(manager, empty, "no_commits")
    assert "has no commits" in str(error)
    assert sh(empty, "for-each-ref") == ""
    assert not (tmp_path / ".nahida-worktrees").exists()


def test_a_workspace_in_a_subdirectory_maps_to_the_same_subdirectory(
    manager: WorktreeManager, repo: Path
) -> None:
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "sub" / "a.txt").write_text("a\n")
    sh(repo, "add", "pkg")
    sh(repo, "commit", "-q", "-m", "pkg")
    tree = manager.ensure(repo / "pkg" / "sub", "s-sub")
    assert tree.workspace == tree.path / "pkg" / "sub"
    assert (tree.workspace / "a.txt").read_text() == "a\n"
    assert open_repository(repo / "pkg").main_root == repo.resolve()


@pytest.mark.parametrize("bad", ["", "../up", "a/b", "a b", "x.lock", "-opt", "a..b", "é"])
def test_a_session_id_that_cannot_name_a_branch_is_refused(
    manager: WorktreeManager, repo: Path, bad: str
) -> None:
    with pytest.raises(ConfigError, match="cannot name a git branch"):
        manager.ensure(repo, bad)
    assert sh(repo, "for-each-ref", "refs/heads/nahida/", "refs/nahida/") == ""


def test_a_base_that_names_no_commit_is_refused(manager: WorktreeManager, repo: Path) -> None:
    with pytest.raises(ConfigError, match="names no commit"):
        manager.ensure(repo, "s-1", base="no-such-branch")
    assert sh(repo, "for-each-ref", "refs/heads/nahida/", "refs/nahida/") == ""


def test_a_worktree_root_inside_the_working_tree_is_refused(repo: Path) -> None:
    manager = WorktreeManager(root=repo / "trees")
    with pytest.raises(ConfigError, match="inside the working tree"):
        manager.ensure(repo, "s-1")
    assert_main_untouched(repo)


def test_a_worktree_root_setting_keeps_repositories_of_one_name_apart(tmp_path: Path) -> None:
    from tests.unit.workspaces.gitrepo import make_demo_repo

    first = make_demo_repo(tmp_path / "a")
    second = make_demo_repo(tmp_path / "b")
    manager = WorktreeManager(root=tmp_path / "trees")
    one, two = manager.ensure(first, "s-1"), manager.ensure(second, "s-1")
    assert one.path.parent.parent == two.path.parent.parent == tmp_path / "trees"
    assert one.path != two.path
    assert one.path.parent.name.startswith("demo-repo-")


def test_an_untracked_workspace_subdirectory_exists_in_the_worktree(
    manager: WorktreeManager, repo: Path
) -> None:
    (repo / "scratch").mkdir()  # empty: git does not track it
    tree = manager.ensure(repo / "scratch", "s-1")
    assert tree.workspace == tree.path / "scratch" and tree.workspace.is_dir()


def test_a_session_started_inside_a_session_worktree_gets_a_sibling(
    manager: WorktreeManager, repo: Path
) -> None:
    child = manager.ensure(repo, "child")
    (child.path / "NOTES.md").write_text("child's committed work\n")
    sh(child.path, "commit", "-q", "-am", "child work")
    grandchild = manager.ensure(child.workspace, "grandchild")
    assert grandchild.path.parent == child.path.parent  # beside it, not inside it
    assert grandchild.base == sh(child.path, "rev-parse", "HEAD")
    (grandchild.path / "NOTES.md").write_text("grandchild\n")
    assert manager.finish(grandchild, message="g") is not None
    assert sh(child.path, "status", "--porcelain") == ""
    assert_main_untouched(repo)
