"""Reading the workspace's instruction files for the system prompt (docs/concepts/context.md).

The pure loop asks for them (``ReadInstructions``) once per run, before its
first provider call, when the job trusts the workspace; this module reads
them, confined to the workspace, and the driver commits the bounded result
as a ``context`` control event (``core/context.py``).  The system prompt of
every later turn -- and of a run resumed by another worker -- is projected
from that event, never read again from the disk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from nahida_workers.core.context import INSTRUCTION_FILE_MAX_BYTES, FoundFile

__all__ = ["read_instruction_files"]

_CHUNK = 64 * 1024


def _read(path: Path, keep: int) -> tuple[bytes, int, str]:
    """``(first keep bytes, size, sha256 of the whole file)``, read in chunks."""
    digest = hashlib.sha256()
    head = bytearray()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if len(head) < keep:
                head += chunk[: keep - len(head)]
    return bytes(head), size, digest.hexdigest()


def read_instruction_files(
    workspace: Path, paths: Sequence[str], *, keep: int = INSTRUCTION_FILE_MAX_BYTES + 4
) -> list[FoundFile]:
    """The files of ``paths`` that exist in ``workspace``, in order.

    A path that resolves out of the workspace (a symbolic link leading out),
    a directory, or a file that cannot be read is skipped: it is recorded as
    missing by the ``context`` control, never followed.

    Args:
        workspace: the session's workspace.
        paths: relative paths (the job's ``instruction_files``).
        keep: bytes kept of each file's start (the rest is only hashed).
    """
    root = workspace.resolve()
    found: list[FoundFile] = []
    for rel in paths:
        path = (root / rel).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            continue
        try:
            head, size, sha = _read(path, keep)
        except OSError:
            continue
        found.append(FoundFile(rel, head, size, sha))
    return found
