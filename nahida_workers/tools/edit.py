"""Edit: replace an exact string in a workspace file, atomically."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.safe_open import WorkspaceFs, workspace_fs
from nahida_workers.tools.workspace import looks_binary, relative_to_workspace, resolve_inside

__all__ = ["MAX_EDIT_BYTES", "Edit"]

#: Largest file Edit reads, largest ``new_string`` and largest file it writes (bytes);
#: the whole file is held in memory.
MAX_EDIT_BYTES = 16 * 1024 * 1024


class Edit(Tool):
    """Replace ``old_string`` with ``new_string`` in one file.

    Arguments: ``{"path": str, "old_string": str, "new_string": str,
    "replace_all"?: bool}``.  ``old_string`` must occur exactly once unless
    ``replace_all`` is true.  Bytes that are not valid UTF-8 survive the edit
    unchanged (surrogateescape round trip).

    Evidence: ``path`` (relative), ``sha256_before``, ``sha256_after``,
    ``bytes_written``, ``replacements``.  Error codes: ``not_found``,
    ``is_directory``, ``not_a_file`` (FIFO, device ...: never opened),
    ``binary_file``, ``file_too_large``, ``edit_too_large`` (``new_string`` or
    the result would exceed ``MAX_EDIT_BYTES``),
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
        """Edit the file; see the class docstring for arguments and evidence.

        The file is opened through :mod:`~nahida_workers.tools.safe_open` (a
        FIFO or device is refused unopened, a symlink race is refused) and
        every size is checked before any big string is built: the file, the
        ``new_string`` and the file the edit would produce are each at most
        :data:`MAX_EDIT_BYTES` (DESIGN.md section 5).
        """
        user_path = str(arguments["path"])
        old = str(arguments["old_string"])
        new = str(arguments["new_string"])
        replace_all = bool(arguments.get("replace_all", False))
        new_bytes = new.encode("utf-8", errors="surrogateescape")
        if len(new_bytes) > MAX_EDIT_BYTES:
            return ToolOutcome.error(
                f"new_string is {len(new_bytes)} bytes; Edit handles at most {MAX_EDIT_BYTES}",
                code="edit_too_large",
            )
        path = resolve_inside(ctx.workspace, user_path)
        rel = relative_to_workspace(ctx.workspace, path)
        with workspace_fs(ctx.workspace) as fs:
            try:
                fd = fs.open_regular(rel)
            except (FileNotFoundError, NotADirectoryError):
                return ToolOutcome.error(
                    f"file not found: {user_path}; use Write to create a file", code="not_found"
                )
            except IsADirectoryError:
                return ToolOutcome.error(f"{user_path} is a directory", code="is_directory")
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fd).st_size
                if size > MAX_EDIT_BYTES:
                    return ToolOutcome.error(
                        f"{user_path} is {size} bytes; Edit handles files up to "
                        f"{MAX_EDIT_BYTES} bytes",
                        code="file_too_large",
                    )
                raw = fh.read(MAX_EDIT_BYTES + 1)
            if len(raw) > MAX_EDIT_BYTES:  # it grew after the fstat
                return ToolOutcome.error(
                    f"{user_path} is over {MAX_EDIT_BYTES} bytes", code="file_too_large"
                )
            if old == new:
                return ToolOutcome.error(
                    "old_string and new_string are identical", code="edit_noop"
                )
            return self._edit(fs, raw, old, new, new_bytes, replace_all, user_path, rel)

    @staticmethod
    def _edit(
        fs: WorkspaceFs,
        raw: bytes,
        old: str,
        new: str,
        new_bytes: bytes,
        replace_all: bool,
        user_path: str,
        rel: str,
    ) -> ToolOutcome:
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
        done = count if replace_all else 1
        old_len = len(old.encode("utf-8", errors="surrogateescape"))
        predicted = len(raw) + done * (len(new_bytes) - old_len)
        if predicted > MAX_EDIT_BYTES:
            return ToolOutcome.error(
                f"the edit would make {rel} {predicted} bytes ({done} replacements); Edit "
                f"writes files up to {MAX_EDIT_BYTES} bytes",
                code="edit_too_large",
                path=rel,
                sha256_before=before,
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        data = updated.encode("utf-8", errors="surrogateescape")
        fs.write_atomic(rel, data, create_parents=False)
        evidence = {
            "path": rel,
            "sha256_before": before,
            "sha256_after": hashlib.sha256(data).hexdigest(),
            "bytes_written": len(data),
            "replacements": done,
        }
        noun = "replacement" if done == 1 else "replacements"
        return ToolOutcome(ToolStatus.OK, f"edited {rel}: {done} {noun}", evidence)
