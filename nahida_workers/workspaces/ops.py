"""Single git steps of the worktree manager, each safe to repeat after a crash.

Callers hold the repository lock (:mod:`nahida_workers.workspaces.lock`)
around every step that touches ``.git/worktrees`` or a session ref.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from nahida_workers.workspaces.git import COMMIT_AUTHOR, GitCommandError, git
from nahida_workers.workspaces.model import BASE_REF_PREFIX, BRANCH_PREFIX
from nahida_workers.workspaces.repository import Repository, WorktreeEntry, list_worktrees

__all__ = [
    "INITIALIZING",
    "commit_all",
    "create_ref",
    "delete_ref",
    "drop_worktree",
    "head_ref",
    "is_ancestor",
    "is_healthy",
    "prune",
    "read_ref",
    "refs_under",
    "remove_stale_lock",
    "sweep_removed",
    "worktree_of",
]

#: Lock reason ``git worktree add`` writes until its checkout is complete:
#: a registration still locked with it belongs to an add that was killed.
INITIALIZING = "initializing"
#: Suffix of a worktree directory moved aside to be deleted.
_REMOVING = ".nahida-removing-"


def prune(repo: Repository) -> None:
    """``git worktree prune``: forget registrations whose directory is gone.

    All of the repository's, as git does (B22 asks for no stale registration
    before an add): a worktree on a filesystem that is unmounted right now
    loses its registration too; ``git worktree lock`` protects one that must not.
    """
    git(repo.common_dir, "worktree", "prune")


def read_ref(repo: Repository, ref: str) -> str | None:
    """The commit ``ref`` points at, None when it does not exist."""
    commit = f"{ref}^{{commit}}"
    done = git(repo.common_dir, "rev-parse", "--verify", "--quiet", commit, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def create_ref(repo: Repository, ref: str, sha: str, *, reason: str) -> None:
    """Create ``ref`` at ``sha``; fails (GitCommandError) if it already exists.

    ``update-ref`` with an empty old value is create-only and writes no
    ``.git/config`` entry (no ``branch.*`` tracking section, case B22).
    """
    git(repo.common_dir, "update-ref", "--create-reflog", "-m", reason, ref, sha, "")


def delete_ref(repo: Repository, ref: str) -> None:
    """Delete ``ref`` if it exists.

    ``update-ref -d`` rather than ``git branch -D``: the latter rewrites
    ``.git/config`` (it drops a ``branch.<name>`` section), taking the very
    config lock B22's race is about.
    """
    if read_ref(repo, ref) is not None:
        git(repo.common_dir, "update-ref", "-d", ref)


def refs_under(repo: Repository) -> dict[str, str]:
    """Every session branch and base ref: full ref name -> commit."""
    out = git(
        repo.common_dir,
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/" + BRANCH_PREFIX,
        BASE_REF_PREFIX,
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def is_ancestor(repo: Repository, older: str, newer: str) -> bool:
    """Whether commit ``older`` is an ancestor of (or equal to) ``newer``."""
    done = git(repo.common_dir, "merge-base", "--is-ancestor", older, newer, check=False)
    return done.returncode == 0


def is_healthy(entry: WorktreeEntry) -> bool:
    """A registration whose directory exists and whose ``git worktree add`` finished."""
    return entry.prunable is None and entry.locked != INITIALIZING and entry.path.is_dir()


def drop_worktree(repo: Repository, path: Path) -> None:
    """Remove the worktree at ``path`` and its registration, whatever state they are in.

    The directory is first renamed aside (atomic on one filesystem), then the
    registration, whose directory is now gone, is pruned, then the renamed
    directory is deleted.  A crash at any point leaves either the intact
    worktree or no worktree at ``path``, never a half-deleted one that a later
    ``git add -A`` would record as deleted files.
    """
    git(repo.common_dir, "worktree", "unlock", str(path), check=False)
    if path.exists() or path.is_symlink():
        aside = path.with_name(f"{path.name}{_REMOVING}{uuid.uuid4().hex[:8]}")
        os.rename(path, aside)
        prune(repo)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        prune(repo)
    sweep_removed(path)


def sweep_removed(path: Path) -> None:
    """Delete directories a crashed :func:`drop_worktree` renamed aside next to ``path``."""
    parent = path.parent
    if parent.is_dir():
        for leftover in parent.glob(f"{path.name}{_REMOVING}*"):
            shutil.rmtree(leftover, ignore_errors=True)


def remove_stale_lock(lock: Path, *, older_than_s: float) -> bool:
    """Delete a git ``*.lock`` file left by a git killed with its host, if old enough.

    A live git holds ``index.lock`` or a ref lock for milliseconds; one older
    than ``older_than_s`` seconds belongs to a process that is gone.  Only the
    session's own locks are passed here (its worktree's index, its branch).

    Returns:
        True when a lock file was deleted.
    """
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age < older_than_s:
        return False
    lock.unlink(missing_ok=True)
    return True


def commit_all(path: Path, *, message: str) -> bool:
    """``git add -A`` and commit in the worktree at ``path`` with the fixed identity.

    Hooks do not run (``--no-verify`` and ``core.hooksPath=/dev/null``), nor
    does signing: the commit is the launcher's record of what the session
    left, not a human's commit.  Ignored files are not committed.

    Returns:
        True when a commit was made, False when there was nothing to commit.

    Raises:
        GitCommandError: git failed (retried by the caller).
    """
    git(path, "add", "-A")
    if git(path, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return False
    name, email = COMMIT_AUTHOR
    identity = {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }
    git(path, "commit", "--no-verify", "--no-gpg-sign", "--quiet", "-m", message, env=identity)
    return True


def worktree_of(repo: Repository, branch: str) -> list[WorktreeEntry]:
    """Registrations that have ``branch`` (short name) checked out."""
    ref = "refs/heads/" + branch
    return [entry for entry in list_worktrees(repo.common_dir) if entry.branch == ref]


def head_ref(path: Path) -> str | None:
    """The full ref checked out in the worktree at ``path``, None when detached."""
    try:
        return git(path, "symbolic-ref", "--quiet", "HEAD").stdout.strip() or None
    except GitCommandError:
        return None
