"""``isolation: worktree`` children: the launcher owns the filesystem (DESIGN.md section 5, B22).

The loop never sees a worktree.  The runtime, around it:

1. :func:`record_base` -- in ``commit_turn``'s spawn (the parent's
   ``tool_call`` transaction) the base commit of the parent's workspace is
   read (``WorktreeManager.base_of``) and recorded in the child's lineage;
2. :func:`prepare` -- after that commit and before the child is published,
   the worktree is created (``ensure``: branch ``nahida/<child id>`` at the
   recorded base);
3. :func:`isolate` (a top-level session: :func:`isolate_top_level`, its job
   asks ``isolation: worktree``) -- the child's own delivery calls ``ensure`` again
   (idempotent; it covers a parent that crashed between 1 and 2) and runs
   the child in ``worktree.workspace``; a worktree that cannot be made ends
   the child ``failed/worktree_unavailable`` (the manager deleted any
   half-created branch), so its parent adopts an error instead of waiting;
4. :func:`finish` -- before the child's seal, everything it changed is
   committed on its branch; the sha is written in its terminal event as
   ``commit`` (the parent's receipt evidence) and the worktree is removed
   or kept per the manager's policy.

Workspaces must be reachable by the worker that runs the child (one host,
or a filesystem every worker mounts at the same path: ``workspaces/``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nahida_workers.core.lineage import ChildLink
from nahida_workers.errors import WorkspaceUnavailableError, WorktreeUnavailableError
from nahida_workers.workspaces import WorktreeManager
from nahida_workers.workspaces.model import Worktree

__all__ = [
    "finish",
    "isolate",
    "isolate_top_level",
    "isolated",
    "prepare",
    "record_base",
    "top_level_isolated",
]

log = logging.getLogger(__name__)

#: The lineage key of a worktree child's base commit.
BASE_KEY = "worktree_base"


def isolated(link: ChildLink | None) -> bool:
    """Whether the session was started with ``isolation: worktree``."""
    return link is not None and link.lineage.get("isolation") == "worktree"


def top_level_isolated(config: Mapping[str, Any]) -> bool:
    """Whether a top-level session's config snapshot asks for ``isolation: worktree``."""
    return str(config.get("isolation") or "") == "worktree"


def isolate_top_level(manager: WorktreeManager, workspace: str, session_id: str) -> Worktree:
    """A top-level ``isolation: worktree`` session's worktree (made or found).

    The same launcher as a child's (:func:`isolate`): the repository lock,
    the retries, the branch ``nahida/<session id>``.  Its base is the
    workspace's HEAD when the first attempt runs, recorded in
    ``refs/nahida/base/<session id>`` before the branch exists, so a
    redelivery -- or the session's next run, after steering -- finds the
    same base and the same branch (``WorktreeManager.ensure``).

    Raises:
        WorktreeUnavailableError / WorkspaceUnavailableError: no worktree here.
    """
    return manager.ensure(Path(workspace), session_id)


def record_base(manager: WorktreeManager, workspace: str) -> str:
    """The commit a worktree child of ``workspace`` starts from (40 hex digits).

    Raises:
        WorkspaceUnavailableError: the workspace is missing here or not a git repository.
    """
    return manager.base_of(Path(workspace))


def prepare(manager: WorktreeManager, workspace: str, child: str, base: str) -> None:
    """Create ``child``'s worktree before it is published; a failure is left to the child.

    The child's delivery calls :func:`isolate` again and fails honestly if
    the worktree still cannot be made.
    """
    try:
        manager.ensure(Path(workspace), child, base=base)
    except (WorktreeUnavailableError, WorkspaceUnavailableError) as exc:
        log.warning("worktree of child %s not created before dispatch: %s", child, exc)


def isolate(manager: WorktreeManager, workspace: str, child: str, link: ChildLink) -> Worktree:
    """The child's worktree (made or found); run its tools in ``.workspace``.

    Raises:
        WorktreeUnavailableError / WorkspaceUnavailableError: no worktree here.
    """
    base = link.lineage.get(BASE_KEY)
    return manager.ensure(Path(workspace), child, base=str(base) if base else None)


def finish(manager: WorktreeManager, worktree: Worktree, summary: str) -> dict[str, Any]:
    """Commit the child's changes on its branch; the terminal event's worktree fields.

    Returns ``{"commit": sha or None, "branch": ...}``; a git failure is
    reported as ``worktree_error`` (the branch and worktree are left for a
    sweeper: ``WorktreeManager.orphans``) and never blocks the seal.
    """
    line = summary.strip().splitlines()[0][:72] if summary.strip() else "Session result"
    try:
        sha = manager.finish(worktree, message=line)
    except (WorktreeUnavailableError, WorkspaceUnavailableError) as exc:
        log.error("worktree of session %s not finished: %s", worktree.session_id, exc)
        return {"commit": None, "branch": worktree.branch, "worktree_error": str(exc)[:500]}
    return {"commit": sha, "branch": worktree.branch}
