"""Read: a text file (or a window of its lines) from the workspace."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator, Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.safe_open import MAX_HASH_BYTES, hash_fd, workspace_fs
from nahida_workers.tools.workspace import (
    BINARY_SNIFF_BYTES,
    looks_binary,
    relative_to_workspace,
    resolve_inside,
)

__all__ = ["DEFAULT_LIMIT", "MAX_LINE_CHARS", "Read"]

#: Lines returned when the model gives no ``limit``.
DEFAULT_LIMIT = 2000

#: Characters of one line shown before it is cut (long minified lines).
MAX_LINE_CHARS = 2000

#: Bytes of the output budget kept free for the trailing paging note.
_NOTE_RESERVE = 256

#: Characters of the first non-empty line kept in the evidence.
_FIRST_LINE_CHARS = 200

_DESCRIPTION = (
    "Read a text file from the workspace. Output lines are numbered like `cat -n`: "
    "the line number right-aligned in 6 columns, a tab, then the line. Use offset "
    "(1-based line) and limit (number of lines) to page through long files; at most "
    f"{DEFAULT_LIMIT} lines are returned by default and lines longer than "
    f"{MAX_LINE_CHARS} characters are cut. Binary files are refused."
)


class Read(Tool):
    r"""Read a file's lines, numbered ``{lineno:>6}\\t{line}``.

    Arguments: ``{"path": str, "offset"?: int >= 1, "limit"?: int >= 1}``.

    Evidence: ``path`` (relative), ``sha256`` and ``size`` (bytes) of the whole
    file, ``lines`` (count), ``first_line`` (first non-empty line, stripped, at
    most 200 characters); for a file over ``MAX_HASH_BYTES`` ``sha256`` and
    ``lines`` are None and ``not_hashed`` says why.  Error codes:
    ``not_found``, ``is_directory``, ``not_a_file`` (FIFO, device ..., never
    opened), ``binary_file`` (with sha256 -- None when too large -- and size),
    ``path_outside_workspace``.
    """

    spec = ToolSpec(
        name="Read",
        description=_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "offset": {"type": "integer", "minimum": 1, "description": "first line, 1-based"},
                "limit": {"type": "integer", "minimum": 1, "description": "number of lines"},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=30.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Read the file; see the class docstring for arguments and evidence.

        The file is opened through :mod:`~nahida_workers.tools.safe_open`: a
        FIFO, socket or device is refused before it is opened, and its type
        and size are known before a byte is hashed; a file larger than
        :data:`~nahida_workers.tools.safe_open.MAX_HASH_BYTES` is neither
        hashed nor scanned past the lines shown (DESIGN.md section 5).
        """
        user_path = str(arguments["path"])
        path = resolve_inside(ctx.workspace, user_path)
        rel = relative_to_workspace(ctx.workspace, path)
        with workspace_fs(ctx.workspace) as fs:
            try:
                fd = fs.open_regular(rel)
            except (FileNotFoundError, NotADirectoryError):
                return ToolOutcome.error(f"file not found: {user_path}", code="not_found", path=rel)
            except IsADirectoryError:
                return ToolOutcome.error(
                    f"{user_path} is a directory; use LS or Glob to list it",
                    code="is_directory",
                    path=rel,
                )
            with os.fdopen(fd, "rb", buffering=0) as raw:
                return self._read_open(raw, user_path, rel, arguments, ctx)

    def _read_open(
        self,
        raw: io.RawIOBase,
        user_path: str,
        rel: str,
        arguments: Mapping[str, Any],
        ctx: ToolContext,
    ) -> ToolOutcome:
        fd = raw.fileno()
        size = os.fstat(fd).st_size
        if looks_binary(os.pread(fd, BINARY_SNIFF_BYTES, 0)):
            digest, size = hash_fd(fd)
            return ToolOutcome.error(
                f"{user_path} is a binary file ({size} bytes); it cannot be shown as text",
                code="binary_file",
                path=rel,
                sha256=digest,
                size=size,
            )
        offset = int(arguments.get("offset", 1))
        limit = int(arguments.get("limit", DEFAULT_LIMIT))
        whole = size <= MAX_HASH_BYTES
        # A file too large to hash is read no further than MAX_HASH_BYTES either.
        reader = _BoundedReader(fd, size if whole else MAX_HASH_BYTES, hashed=whole)
        content, lines, first_line = _render(
            io.BufferedReader(reader), offset, limit, ctx.max_output_bytes, scan_all=whole
        )
        evidence: dict[str, Any] = {
            "path": rel,
            "sha256": reader.hexdigest() if whole else None,
            "size": size,
            "lines": lines if whole else None,
            "first_line": first_line,
        }
        if not whole:
            evidence["not_hashed"] = f"larger than {MAX_HASH_BYTES} bytes"
        return ToolOutcome(ToolStatus.OK, content, evidence)


class _BoundedReader(io.RawIOBase):
    """Reads an open file from offset 0, at most ``limit`` bytes, hashing what it reads."""

    def __init__(self, fd: int, limit: int, *, hashed: bool) -> None:
        self._fd = fd
        self._left = limit
        self._offset = 0
        self._digest = hashlib.sha256() if hashed else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        data = os.pread(self._fd, min(len(buffer), self._left), self._offset)
        n = len(data)
        buffer[:n] = data
        self._left -= n
        self._offset += n
        if self._digest is not None:
            self._digest.update(data)
        return n

    def hexdigest(self) -> str | None:
        """sha256 of every byte read so far (None when not hashing)."""
        return None if self._digest is None else self._digest.hexdigest()


def _render(
    raw: io.BufferedReader, offset: int, limit: int, max_bytes: int, *, scan_all: bool = True
) -> tuple[str, int, str]:
    """Number the lines ``offset .. offset+limit-1`` and gather file facts in one pass.

    Returns:
        ``(content, total line count, first non-empty line)``.  The content
        stops early, with a note, once it would exceed ``max_bytes`` bytes.
        Without ``scan_all`` the reading stops after the lines shown (the
        count is then only the lines read).
    """
    out: list[str] = []
    used = 0
    stopped_at: int | None = None
    first_line = ""
    total = 0
    last = offset + limit - 1
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")
    for total, (line, cut) in enumerate(_lines(text), start=1):
        if not first_line and line.strip():
            first_line = line.strip()[:_FIRST_LINE_CHARS]
        if offset <= total <= last and stopped_at is None:
            shown = f"{total:>6}\t{line}" + (" ... [line cut]" if cut else "")
            used += len(shown.encode("utf-8")) + 1
            if used > max_bytes - _NOTE_RESERVE:
                stopped_at = total
            else:
                out.append(shown)
        if not scan_all and (total >= last or stopped_at is not None):
            break
    text.detach()
    if total == 0:
        return "(the file is empty)", 0, ""
    if offset > total:
        return (
            f"(offset {offset} is past the end of the file: it has {total} lines)",
            total,
            first_line,
        )
    if stopped_at is not None:
        out.append(
            f"... (output limit reached; lines {stopped_at}-{min(last, total)} not shown: "
            f"read again with offset={stopped_at})"
        )
    elif last < total or not scan_all:
        out.append(
            f"... (showing lines {offset}-{min(last, total)}"
            + (f" of {total}" if scan_all else "")
            + f"; use offset={min(last, total) + 1} for more)"
        )
    return "\n".join(out), total, first_line


def _lines(text: io.TextIOWrapper) -> Iterator[tuple[str, bool]]:
    """Yield ``(line without its newline, was_cut)`` reading at most one cap of a line at a time.

    A single 1 GB line never lands in memory: after :data:`MAX_LINE_CHARS`
    characters the rest of the line is read in pieces and dropped.
    """
    while piece := text.readline(MAX_LINE_CHARS + 1):
        cut = False
        if not piece.endswith("\n") and len(piece) > MAX_LINE_CHARS:
            cut = True
            piece = piece[:MAX_LINE_CHARS]
            while rest := text.readline(1 << 16):
                if rest.endswith("\n"):
                    break
        yield piece.rstrip("\r\n"), cut
