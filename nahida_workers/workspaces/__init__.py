"""Session workspaces: one git worktree per session (DESIGN.md section 8, case B22).

Usage by a launcher (the ``Task`` tool with ``isolation: worktree``)::

    manager = WorktreeManager.from_settings(settings)
    base = manager.base_of(workspace)              # record it with the child session
    tree = manager.ensure(workspace, child_id, base=base)
    ...                                            # the child runs in tree.workspace
    sha = manager.finish(tree, message="...")      # result commit, or None: no change

Workspaces must be reachable by the worker that runs the session: one host, or
a filesystem every worker mounts at the same path (docs/jobs/worktrees.md).
"""

from nahida_workers.workspaces.model import (
    BASE_REF_PREFIX,
    BRANCH_PREFIX,
    SessionBranch,
    Worktree,
    branch_name,
)
from nahida_workers.workspaces.repository import Repository, open_repository
from nahida_workers.workspaces.worktrees import WorktreeManager

__all__ = [
    "BASE_REF_PREFIX",
    "BRANCH_PREFIX",
    "Repository",
    "SessionBranch",
    "Worktree",
    "WorktreeManager",
    "branch_name",
    "open_repository",
]
