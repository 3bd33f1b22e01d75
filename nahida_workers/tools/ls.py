"""LS: list one directory of the workspace."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.safe_open import workspace_fs
from nahida_workers.tools.workspace import relative_to_workspace, resolve_inside

__all__ = ["LS", "MAX_LISTED"]

#: Entries listed before the rest are summarised as a count.
MAX_LISTED = 1000


class LS(Tool):
    """List a directory's entries, sorted by name.

    Directories end with ``/`` and symlinks with ``@`` (like ``ls -F``; the
    link target is not shown).  Arguments: ``{"path"?: str}`` (default: the
    workspace root).

    Evidence: ``path`` (relative) and ``entries`` (count, also those not
    listed).  Error codes: ``not_found``, ``not_a_directory``,
    ``path_outside_workspace``.
    """

    spec = ToolSpec(
        name="LS",
        description=(
            "List the entries of a directory in the workspace (default: its root), "
            "sorted by name; directories end with '/', symlinks with '@'."
        ),
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "additionalProperties": False,
        },
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=10.0,
        # Cheaper inline than a Celery round trip (~4 ms).
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """List; see the class docstring for arguments and evidence."""
        user_path = str(arguments.get("path", "."))
        path = resolve_inside(ctx.workspace, user_path)
        if not path.exists():
            return ToolOutcome.error(f"directory not found: {user_path}", code="not_found")
        if not path.is_dir():
            return ToolOutcome.error(
                f"{user_path} is not a directory; use Read for files", code="not_a_directory"
            )
        names: list[str] = []
        rel = relative_to_workspace(ctx.workspace, path)
        # Listed through a descriptor opened component by component with
        # O_NOFOLLOW: a directory swapped for a symlink meanwhile is refused,
        # never listed (DESIGN.md section 5).
        with workspace_fs(ctx.workspace) as fs:
            try:
                dir_fd = fs.open_directory(rel)
            except (FileNotFoundError, NotADirectoryError):
                return ToolOutcome.error(f"directory not found: {user_path}", code="not_found")
            try:
                entries = list(os.scandir(dir_fd))
            finally:
                os.close(dir_fd)
        for entry in entries:
            if entry.is_symlink():
                names.append(entry.name + "@")
            elif entry.is_dir(follow_symlinks=False):
                names.append(entry.name + "/")
            else:
                names.append(entry.name)
        names.sort()
        evidence = {"path": rel, "entries": len(names)}
        if not names:
            return ToolOutcome(ToolStatus.OK, "(empty directory)", evidence)
        shown = names[:MAX_LISTED]
        if len(names) > MAX_LISTED:
            shown.append(f"... ({len(names) - MAX_LISTED} more entries not shown)")
        return ToolOutcome(ToolStatus.OK, "\n".join(shown), evidence)
