"""Edit: replace an exact string in a workspace file, atomically."""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.workspace import looks_binary, relative_to_workspace, resolve_inside
from nahida_workers.tools.write import atomic_write

__all__ = ["MAX_EDIT_BYTES", "Edit"]

#: Files larger than this are refused (bytes); the whole file is held in memory.
MAX_EDIT_BYTES = 16 * 1024 * 1024


class Edit(Tool):
    """Replace ``old_string`` with ``new_string`` in one file.

    Arguments: ``{"path": str, "old_string": str, "new_string": str,
    "replace_all"?: bool}``.  ``old_string`` must occur exactly once unless
    ``replace_all`` is true.  Bytes that are not valid UTF-8 survive the edit
    unchanged (surrogateescape round trip).

    Evidence: ``path`` (relative), ``sha256_before``, ``sha256_after``,
    ``bytes_written``, ``replacements``.  Error codes: ``not_found``,
    ``is_directory``, ``not_a_file``, ``binary_file``, ``file_too_large``,
    ``edit_noop`` (old and new are equal), ``edit_no_match``,
    ``edit_ambiguous``, ``path_outside_workspace``.
    """

    spec = ToolSpec(
        name="Edit",
        description=(
            "Replace an exact string in a file. old_string must match the file's text "
            "exactly (whitespace and indentation included) and occur exactly once; include "
            "more surrounding lines to make it unique, or set replace_all to change every "
            "occurrence."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        },
        read_only=False,
        concurrency_safe=False,
        idempotent=False,
        evidence_kind=EvidenceKind.MUTATE,
        timeout_s=30.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Edit the file; see the class docstring for arguments and evidence."""
        user_path = str(arguments["path"])
        old = str(arguments["old_string"])
        new = str(arguments["new_string"])
        replace_all = bool(arguments.get("replace_all", False))
        path = resolve_inside(ctx.workspace, user_path)
        rel = relative_to_workspace(ctx.workspace, path)
        try:
            st = path.stat()
        except FileNotFoundError:
            return ToolOutcome.error(
                f"file not found: {user_path}; use Write to create a file", code="not_found"
            )
        if stat.S_ISDIR(st.st_mode):
            return ToolOutcome.error(f"{user_path} is a directory", code="is_directory")
        if not stat.S_ISREG(st.st_mode):
            return ToolOutcome.error(f"{user_path} is not a regular file", code="not_a_file")
        if st.st_size > MAX_EDIT_BYTES:
            return ToolOutcome.error(
                f"{user_path} is {st.st_size} bytes; Edit handles files up to "
                f"{MAX_EDIT_BYTES} bytes",
                code="file_too_large",
            )
        if old == new:
            return ToolOutcome.error("old_string and new_string are identical", code="edit_noop")
        raw = path.read_bytes()
        before = hashlib.sha256(raw).hexdigest()
        if looks_binary(raw):
            return ToolOutcome.error(
                f"{user_path} is a binary file", code="binary_file", sha256=before, size=len(raw)
            )
        text = raw.decode("utf-8", errors="surrogateescape")
        count = text.count(old)
        if count == 0:
            return ToolOutcome.error(
                f"old_string was not found in {rel}; Read the file and copy the text exactly",
                code="edit_no_match",
                path=rel,
                sha256_before=before,
            )
        if count > 1 and not replace_all:
            return ToolOutcome.error(
                f"old_string occurs {count} times in {rel}; add surrounding context to make "
                "it unique, or set replace_all to true",
                code="edit_ambiguous",
                path=rel,
                sha256_before=before,
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        data = updated.encode("utf-8", errors="surrogateescape")
        atomic_write(path, data)
        evidence = {
            "path": rel,
            "sha256_before": before,
            "sha256_after": hashlib.sha256(data).hexdigest(),
            "bytes_written": len(data),
            "replacements": count if replace_all else 1,
        }
        noun = "replacement" if evidence["replacements"] == 1 else "replacements"
        return ToolOutcome(
            ToolStatus.OK, f"edited {rel}: {evidence['replacements']} {noun}", evidence
        )
