"""Write: create or replace a file in the workspace, atomically."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.workspace import relative_to_workspace, resolve_inside, sha256_file

__all__ = ["Write", "atomic_write", "hash_if_exists"]


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a temp file in the same dir, then os.replace.

    A reader sees the old content or the new one, never a torn file.  An
    existing file keeps its permission bits; a new one gets 0o666 minus the
    umask, like any created file.

    Raises:
        OSError: the directory is not writable or the disk is full.
    """
    mode: int | None = None
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def hash_if_exists(path: Path) -> str | None:
    """sha256 hex of the file at ``path``, or None when there is none.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        return sha256_file(path)[0]
    except FileNotFoundError:
        return None


class Write(Tool):
    """Write UTF-8 text to a file, creating parent directories inside the workspace.

    Arguments: ``{"path": str, "content": str}``.  The file is replaced
    atomically (temp file in the same directory, then ``os.replace``); a
    symlink inside the workspace is written through, to its target.

    Evidence: ``path`` (relative), ``sha256_before`` (None for a new file),
    ``sha256_after``, ``bytes_written``.  Error codes: ``is_directory``,
    ``not_a_directory`` (a parent is a file), ``path_outside_workspace``.
    """

    spec = ToolSpec(
        name="Write",
        description=(
            "Create or overwrite a file in the workspace with the given UTF-8 content. "
            "Parent directories are created. Prefer Edit for changing part of a file."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "content": {"type": "string"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        read_only=False,
        concurrency_safe=False,
        idempotent=False,
        evidence_kind=EvidenceKind.MUTATE,
        timeout_s=30.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Write the file; see the class docstring for arguments and evidence."""
        user_path = str(arguments["path"])
        path = resolve_inside(ctx.workspace, user_path)
        rel = relative_to_workspace(ctx.workspace, path)
        if path.is_dir():
            return ToolOutcome.error(f"{user_path} is a directory", code="is_directory", path=rel)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            return ToolOutcome.error(
                f"cannot create {user_path}: a parent path is a file, not a directory",
                code="not_a_directory",
                path=rel,
            )
        before = hash_if_exists(path)
        data = str(arguments["content"]).encode("utf-8")
        atomic_write(path, data)
        evidence = {
            "path": rel,
            "sha256_before": before,
            "sha256_after": hashlib.sha256(data).hexdigest(),
            "bytes_written": len(data),
        }
        verb = "created" if before is None else "overwrote"
        return ToolOutcome(ToolStatus.OK, f"{verb} {rel} ({len(data)} bytes)", evidence)
