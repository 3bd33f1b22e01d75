"""Names and values of session worktrees: the branch, the base ref, the default path.

Naming (DESIGN.md section 8, case B22):

* branch ``nahida/<session id>`` (``refs/heads/nahida/<session id>``): the
  session's work, kept after the worktree is removed (it holds the result);
* ref ``refs/nahida/base/<session id>``: the commit the branch started from,
  written before the branch, so an attempt after a crash uses the same base
  and a sweeper can tell a branch with work from a branch left by a failed
  creation.  It is not a branch: ``git branch`` does not list it;
* worktree directory ``<main working tree's parent>/.nahida-worktrees/<repo
  name>/<session id>`` by default (see :func:`worktree_path`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nahida_workers.errors import ConfigError
from nahida_workers.workspaces.repository import Repository

__all__ = [
    "BASE_REF_PREFIX",
    "BRANCH_PREFIX",
    "DEFAULT_ROOT_NAME",
    "SessionBranch",
    "Worktree",
    "base_ref",
    "branch_name",
    "check_session_id",
    "worktree_path",
]

#: Prefix of every session branch (short name, under ``refs/heads/``).
BRANCH_PREFIX = "nahida/"
#: Prefix of the refs that record each session's base commit.
BASE_REF_PREFIX = "refs/nahida/base/"
#: Directory, beside the main working tree, that holds its session worktrees by default.
DEFAULT_ROOT_NAME = ".nahida-worktrees"

# A session id becomes a ref name component and a directory name: keep it to
# characters that are safe in both (uuids and ids like ``s-b22-p1`` are).
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` when it can name a branch and a directory.

    Raises:
        ConfigError: it is empty, longer than 200 characters, starts with
            ``.``/``-``, holds anything but letters, digits, ``.``, ``_``,
            ``-``, holds ``..`` or ends with ``.lock`` or ``.`` (git's ref rules).
    """
    if (
        not _SESSION_ID.fullmatch(session_id)
        or ".." in session_id
        or session_id.endswith((".lock", "."))
    ):
        raise ConfigError(f"session id {session_id!r} cannot name a git branch and a directory")
    return session_id


def branch_name(session_id: str) -> str:
    """``nahida/<session id>``: the session's branch (short name)."""
    return BRANCH_PREFIX + check_session_id(session_id)


def base_ref(session_id: str) -> str:
    """``refs/nahida/base/<session id>``: the ref recording the session's base commit."""
    return BASE_REF_PREFIX + check_session_id(session_id)


def worktree_path(repo: Repository, session_id: str, root: Path | None) -> Path:
    """Where a session's worktree goes.

    Default (``root`` None): ``<P>/.nahida-worktrees/<N>/<session id>`` where
    ``<P>/<N>`` is the repository's main working tree.  Why there:

    * outside the main working tree, so ``git status`` there stays empty
      without touching ``.gitignore`` or ``.git/info/exclude`` (B22);
    * beside the repository, hence on the same filesystem and reachable by
      exactly the workers that reach the repository (the one-host /
      shared-filesystem assumption covers both at once);
    * computed from the repository and the session id alone, so any worker
      finds the same path without a record; two repositories cannot collide
      (siblings have distinct names).

    With ``root`` (setting ``NAHIDA_WORKTREE_ROOT``):
    ``<root>/<N>-<10 hex of sha256(main working tree path)>/<session id>``,
    the hash keeping apart repositories of one name in different places.

    Raises:
        ConfigError: the path would lie inside the main working tree (it would
            show up in ``git status`` and in every session's workspace).
    """
    check_session_id(session_id)
    main = repo.main_root
    if root is None:
        path = main.parent / DEFAULT_ROOT_NAME / main.name / session_id
    else:
        digest = hashlib.sha256(str(main).encode()).hexdigest()[:10]
        path = Path(root).expanduser().absolute() / f"{main.name}-{digest}" / session_id
    if path.is_relative_to(main) or path.is_relative_to(repo.toplevel):
        raise ConfigError(
            f"worktree root puts {path} inside the working tree {main}: choose a root outside it"
        )
    return path


@dataclass(frozen=True)
class Worktree:
    """One session's worktree, as :meth:`WorktreeManager.ensure` made or found it.

    Plain values: store :meth:`to_dict` with the session and rebuild with
    :meth:`from_dict` to call ``finish`` after a crash.

    Attributes:
        repo: the workspace the session was given (absolute).
        session_id: the session that owns it.
        branch: ``nahida/<session id>``.
        path: the worktree directory.
        base: the commit the branch started from (40 hex digits).
        workspace: where the session's tools run: ``path`` joined with the
            workspace's subdirectory of its repository (``path`` when the
            workspace is the repository root).
    """

    repo: Path
    session_id: str
    branch: str
    path: Path
    base: str
    workspace: Path

    def to_dict(self) -> dict[str, str]:
        """JSON-ready fields (paths as strings)."""
        return {
            "repo": str(self.repo),
            "session_id": self.session_id,
            "branch": self.branch,
            "path": str(self.path),
            "base": self.base,
            "workspace": str(self.workspace),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Worktree:
        """The inverse of :meth:`to_dict`."""
        return cls(
            repo=Path(data["repo"]),
            session_id=str(data["session_id"]),
            branch=str(data["branch"]),
            path=Path(data["path"]),
            base=str(data["base"]),
            workspace=Path(data["workspace"]),
        )


@dataclass(frozen=True)
class SessionBranch:
    """A session branch or base ref found in a repository (for a sweeper).

    Attributes:
        session_id: the session it belongs to.
        tip: the branch's commit, None when only the base ref is left.
        base: the recorded base commit, None when no base ref exists.
        worktree: the healthy registered worktree on the branch, None if none.
    """

    session_id: str
    tip: str | None
    base: str | None
    worktree: Path | None

    @property
    def branch(self) -> str:
        """``nahida/<session id>``."""
        return BRANCH_PREFIX + self.session_id

    @property
    def has_work(self) -> bool:
        """The branch holds commits beyond its base (or its base is unknown): a result.

        False for a branch still at its base, the debris of a failed or
        interrupted creation, safe to delete with ``discard``.
        """
        return self.tip is not None and self.tip != self.base
