"""One attempt of each worktree operation: what runs under the repository lock.

:class:`~nahida_workers.workspaces.worktrees.WorktreeManager` takes the lock,
calls one of these, and retries it on a git or OS failure.  Each attempt reads
the repository's state afresh and does only what is missing, so running it
again after a failure or a crash at any point is safe (case B22).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nahida_workers.workspaces.ops as ops
from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces.git import git
from nahida_workers.workspaces.model import (
    BASE_REF_PREFIX,
    BRANCH_PREFIX,
    SessionBranch,
    Worktree,
    base_ref,
    branch_name,
)
from nahida_workers.workspaces.repository import (
    Repository,
    WorktreeEntry,
    list_worktrees,
    resolve_base,
)

__all__ = ["abandon", "create", "discard", "entries_of", "remove", "session_branches", "value"]

_HEADS = "refs/heads/"


def value(repo: Repository, sid: str, path: Path, base: str) -> Worktree:
    """The :class:`Worktree` of session ``sid`` at ``path``."""
    workspace = path if repo.subdir == Path(".") else path / repo.subdir
    return Worktree(repo.workspace, sid, branch_name(sid), path, base, workspace)


def create(
    repo: Repository,
    sid: str,
    path: Path,
    wanted: str | None,
    on_branch_created: Callable[[str], None] | None,
) -> Worktree:
    """Make (or find) session ``sid``'s worktree; see ``WorktreeManager.ensure``.

    Order: prune stale registrations; record the base (once); return a healthy
    worktree on the branch if there is one, dropping a broken one; create the
    branch at the base unless it exists (an existing one must descend from the
    base); clear debris at ``path``; ``git worktree add <path> <branch>``.

    Raises:
        GitCommandError, OSError: a step failed (the manager retries).
        WorktreeUnavailableError: a state no retry can change (see ``ensure``).
    """
    branch = branch_name(sid)
    ops.prune(repo)
    ops.sweep_removed(path)
    recorded = ops.read_ref(repo, base_ref(sid))
    if recorded is None:
        recorded = wanted or resolve_base(repo)
        ops.create_ref(repo, base_ref(sid), recorded, reason=f"nahida: base of session {sid}")
    elif wanted is not None and wanted != recorded:
        raise WorktreeUnavailableError(
            f"session {sid} was based on {recorded}, not on the {wanted} asked for"
        )
    for entry in list_worktrees(repo.common_dir):
        ours = entry.branch == _HEADS + branch
        if not ours and entry.path != path:
            continue
        if not ops.is_healthy(entry):
            ops.drop_worktree(repo, entry.path)  # a killed add, or a directory gone
        elif entry.path in (repo.main_root, repo.toplevel) or not ours:
            raise WorktreeUnavailableError(
                f"the worktree {entry.path} is on {entry.branch or 'a detached HEAD'}: "
                f"not a session worktree on {branch}"
            )
        else:
            return value(repo, sid, entry.path, recorded)
    tip = ops.read_ref(repo, _HEADS + branch)
    if tip is None:
        git(repo.common_dir, "branch", "--no-track", branch, recorded)
        if on_branch_created is not None:
            on_branch_created(sid)
    elif not ops.is_ancestor(repo, recorded, tip):
        raise WorktreeUnavailableError(
            f"{branch} is at {tip}, which does not descend from the session's base {recorded}"
        )
    if path.exists() or path.is_symlink():
        ops.drop_worktree(repo, path)  # not registered: debris of an interrupted attempt
    git(repo.common_dir, "worktree", "add", str(path), branch)
    made = value(repo, sid, path, recorded)
    # A workspace subdirectory git does not track (empty, untracked) exists in
    # the main tree only: give the session the same directory in its worktree.
    made.workspace.mkdir(parents=True, exist_ok=True)
    return made


def abandon(repo: Repository, sid: str, path: Path) -> None:
    """After creation failed for good: delete what it left, unless it holds work.

    B22 ``variant_create_fails``: the half-created branch is deleted, with its
    base ref, but only when it is still at its base and no worktree has it.
    """
    branch = _HEADS + branch_name(sid)
    if any(e.branch == branch and ops.is_healthy(e) for e in list_worktrees(repo.common_dir)):
        return
    if path.exists() or path.is_symlink():
        ops.drop_worktree(repo, path)
    tip = ops.read_ref(repo, branch)
    if tip is None or tip == ops.read_ref(repo, base_ref(sid)):
        ops.delete_ref(repo, branch)
        ops.delete_ref(repo, base_ref(sid))


def entries_of(repo: Repository, worktree: Worktree) -> list[WorktreeEntry]:
    """Registrations on the session's branch or at its path (after a prune)."""
    ops.prune(repo)
    ref = _HEADS + worktree.branch
    return [
        e for e in list_worktrees(repo.common_dir) if e.branch == ref or e.path == worktree.path
    ]


def remove(repo: Repository, entries: list[WorktreeEntry], worktree: Worktree) -> None:
    """Remove the session's worktrees ``entries``; never the main or the workspace's own tree."""
    for entry in entries:
        if entry.path not in (repo.main_root, repo.toplevel):
            ops.drop_worktree(repo, entry.path)
    ops.sweep_removed(worktree.path)


def discard(repo: Repository, sid: str, path: Path) -> None:
    """Remove session ``sid``'s worktrees and delete its branch and base ref.

    Raises:
        WorktreeUnavailableError: the branch is checked out in the main working
            tree or in the workspace's own (nothing is deleted).
    """
    branch = branch_name(sid)
    ops.prune(repo)
    for entry in list_worktrees(repo.common_dir):
        if entry.branch != _HEADS + branch and entry.path != path:
            continue
        if entry.path in (repo.main_root, repo.toplevel):
            raise WorktreeUnavailableError(
                f"{branch} is checked out in {entry.path}: not discarded"
            )
        ops.drop_worktree(repo, entry.path)
    if path.exists() or path.is_symlink():
        ops.drop_worktree(repo, path)
    ops.sweep_removed(path)
    ops.delete_ref(repo, _HEADS + branch)
    ops.delete_ref(repo, base_ref(sid))


def session_branches(repo: Repository) -> list[SessionBranch]:
    """Every session branch or lone base ref, with its healthy worktree if any."""
    refs = ops.refs_under(repo)
    trees = {e.branch: e.path for e in list_worktrees(repo.common_dir) if ops.is_healthy(e)}
    heads, bases = _HEADS + BRANCH_PREFIX, BASE_REF_PREFIX
    ids = {r[len(heads) :] for r in refs if r.startswith(heads)}
    ids |= {r[len(bases) :] for r in refs if r.startswith(bases)}
    return [
        SessionBranch(sid, refs.get(heads + sid), refs.get(bases + sid), trees.get(heads + sid))
        for sid in sorted(ids)
    ]
