"""Write: create or replace a file in the workspace, atomically."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.safe_open import hash_fd, workspace_fs
from nahida_workers.tools.workspace import relative_to_workspace, resolve_inside, sha256_file

__all__ = ["MAX_WRITE_BYTES", "Write", "atomic_write", "hash_if_exists"]

#: Largest content Write writes (bytes of UTF-8): output is bounded by bytes, not trust.
MAX_WRITE_BYTES = 16 * 1024 * 1024


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

    Evidence: ``path`` (relative), ``sha256_before`` (None for a new file or
    one over ``MAX_HASH_BYTES``), ``sha256_after``, ``bytes_written``.  Error
    codes: ``is_directory``, ``not_a_directory`` (a parent is a file),
    ``not_a_file`` (a FIFO, socket or device is there; never opened),
    ``content_too_large``, ``path_outside_workspace``.
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
        """Write the file; see the class docstring for arguments and evidence.

        Every path component is opened relative to a directory descriptor
        (:mod:`~nahida_workers.tools.safe_open`): a FIFO, socket or device at
        the path is refused without being opened, and a parent swapped for a
        symlink cannot move the write outside the workspace.
        """
        user_path = str(arguments["path"])
        data = str(arguments["content"]).encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            return ToolOutcome.error(
                f"content is {len(data)} bytes; Write handles at most {MAX_WRITE_BYTES} bytes",
                code="content_too_large",
            )
        path = resolve_inside(ctx.workspace, user_path)
        rel = relative_to_workspace(ctx.workspace, path)
        with workspace_fs(ctx.workspace) as fs:
            st = fs.lstat(rel)
            if st is not None and stat.S_ISDIR(st.st_mode):
                return ToolOutcome.error(
                    f"{user_path} is a directory", code="is_directory", path=rel
                )
            before: str | None = None
            if st is not None:
                fd = fs.open_regular(rel)  # refuses a FIFO/socket/device unopened
                try:
                    before, _ = hash_fd(fd)
                finally:
                    os.close(fd)
            try:
                fs.write_atomic(rel, data)
            except (FileExistsError, NotADirectoryError):
                return ToolOutcome.error(
                    f"cannot create {user_path}: a parent path is a file, not a directory",
                    code="not_a_directory",
                    path=rel,
                )
            except IsADirectoryError:
                return ToolOutcome.error(
                    f"{user_path} is a directory", code="is_directory", path=rel
                )
        evidence = {
            "path": rel,
            "sha256_before": before,
            "sha256_after": hashlib.sha256(data).hexdigest(),
            "bytes_written": len(data),
        }
        verb = "created" if st is None else "overwrote"
        return ToolOutcome(ToolStatus.OK, f"{verb} {rel} ({len(data)} bytes)", evidence)
