"""Path confinement, output caps and file helpers shared by the tools.

Every path a tool touches must resolve inside the session's workspace
(DESIGN.md section 5).  :func:`resolve_inside` is that rule, in one place:
it resolves ``..`` segments and symlinks (anywhere along the path, the final
component included) and refuses anything that lands outside.

The check is made once, before the tool acts on the path; the tools then
open the path through :mod:`~nahida_workers.tools.safe_open` (component by
component with ``O_NOFOLLOW`` from a workspace root descriptor), so a process
that swaps a directory for a symlink between the check and the use is
refused, not followed (DESIGN.md section 5).  Bash is not confined by any of
this: it can read and write anywhere its user can.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from nahida_workers.errors import PathOutsideWorkspaceError, ToolError
from nahida_workers.tools.output_bytes import byte_summary, looks_binary_output

__all__ = [
    "BINARY_SNIFF_BYTES",
    "BoundedCapture",
    "cap_text",
    "is_binary_file",
    "looks_binary",
    "relative_to_workspace",
    "resolve_inside",
    "sha256_file",
    "walk_files",
]

#: How much of a file is sniffed for a NUL byte to call it binary (bytes).
BINARY_SNIFF_BYTES = 8 * 1024

#: Chunk size for hashing and copying files (bytes).
_CHUNK = 1 << 20

#: Directory (or worktree pointer file) names the walkers never enter or list.
_SKIPPED_NAMES = frozenset({".git"})


def resolve_inside(workspace: Path, user_path: str) -> Path:
    """Resolve a path the model gave and prove it stays inside the workspace.

    Args:
        workspace: the workspace root (resolved again here, so a symlinked
            root is fine).
        user_path: relative to the workspace, or absolute.  ``""`` and ``"."``
            mean the root.

    Returns:
        The absolute, symlink-free path (it need not exist).

    Raises:
        PathOutsideWorkspaceError: the path contains a NUL byte, or it resolves
            outside the workspace through ``..``, an absolute path, or a
            symlink (on any component) whose target is outside.
        ToolError: code ``symlink_loop`` when the path runs into a symlink loop.
    """
    if "\x00" in user_path:
        raise PathOutsideWorkspaceError(
            f"path {user_path!r} contains a NUL byte; pass a plain path relative to the workspace"
        )
    root = workspace.resolve(strict=False)
    given = Path(user_path)
    candidate = given if given.is_absolute() else root / given
    try:
        resolved = candidate.resolve(strict=False)
    except RuntimeError:  # Python 3.11 reports a symlink loop this way
        raise ToolError(
            f"path {user_path!r} runs into a symlink loop", code="symlink_loop"
        ) from None
    if resolved.is_relative_to(root):
        return resolved
    raise PathOutsideWorkspaceError(_escape_reason(root, user_path, candidate))


def _escape_reason(root: Path, user_path: str, candidate: Path) -> str:
    """Explain which route left the workspace, so the model can correct itself."""
    lexical = Path(os.path.normpath(candidate))
    if not lexical.is_relative_to(root):
        if Path(user_path).is_absolute():
            why = "it is an absolute path outside the workspace"
        else:
            why = "its '..' segments climb above the workspace root"
    else:
        why = "a symlink on it points outside the workspace"
    return (
        f"path {user_path!r} is outside the workspace: {why}. "
        "Use a path relative to the workspace root."
    )


def relative_to_workspace(workspace: Path, path: Path) -> str:
    """``path`` (resolved, inside) relative to the workspace, POSIX style; ``.`` is the root."""
    rel = path.relative_to(workspace.resolve(strict=False)).as_posix()
    return rel or "."


def cap_text(text: str, max_bytes: int) -> tuple[str, dict[str, object]]:
    r"""Keep ``text`` within ``max_bytes`` UTF-8 bytes, keeping its head and tail.

    Args:
        text: any text (lone surrogates count as ``?``).
        max_bytes: the cap, in bytes of UTF-8.

    Returns:
        ``(text, {})`` when it fits.  Otherwise the head and the tail (about
        half of the budget each, cut on character boundaries) joined by a
        marker line ``\\n... [truncated N bytes; sha256 <hex>] ...\\n``, and
        evidence ``{"truncated": True, "size": total bytes, "sha256": hex of
        the full text}``.  The returned text is never longer than
        ``max_bytes`` bytes; when even the marker does not fit, only a head is
        kept.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return text, {}
    digest = hashlib.sha256(data).hexdigest()
    evidence: dict[str, object] = {"truncated": True, "size": len(data), "sha256": digest}
    # The omitted count is at most len(data), so this marker is the longest one.
    widest = len(_marker(len(data), digest).encode("utf-8"))
    budget = max_bytes - widest
    if budget <= 0:
        return data[: max(max_bytes, 0)].decode("utf-8", errors="ignore"), evidence
    head_n = budget // 2
    tail_n = budget - head_n
    # errors="ignore" drops only the partial character at the cut.
    head = data[:head_n].decode("utf-8", errors="ignore")
    tail = data[len(data) - tail_n :].decode("utf-8", errors="ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return head + _marker(omitted, digest) + tail, evidence


def _marker(omitted: int, digest: str) -> str:
    return f"\n... [truncated {omitted} bytes; sha256 {digest}] ...\n"


class BoundedCapture:
    """Capture of one output stream in bounded memory: a head, a sliding tail, a count, a hash.

    Whatever the stream's size, at most ``limit`` bytes are held (half head,
    half tail); ``total`` and the sha256 cover every byte fed.  Not thread-safe:
    one reader thread feeds it, and it is read after that thread ends.

    Args:
        limit: bytes kept, in all.
    """

    def __init__(self, limit: int) -> None:
        self.head_max = limit // 2
        self.tail_max = limit - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``, keeping it only while it belongs to the head or tail."""
        self.total += len(chunk)
        self._digest.update(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.tail_max
            if excess > 0:
                del self.tail[:excess]

    def hexdigest(self) -> str:
        """sha256 hex digest of every byte fed so far."""
        return self._digest.hexdigest()

    @property
    def binary(self) -> bool:
        """True when the captured head or tail is not text (``tools/output_bytes.py``)."""
        whole = self.total == len(self.head) + len(self.tail)
        if whole:
            return looks_binary_output(bytes(self.head + self.tail))
        return looks_binary_output(bytes(self.head)) or looks_binary_output(
            bytes(self.tail), cut_start=True
        )

    def render(self, budget: int) -> str:
        r"""The stream as text within ``budget`` UTF-8 bytes, or a byte summary.

        Returns:
            A stream that is not text (:attr:`binary`): its
            :func:`~nahida_workers.tools.output_bytes.byte_summary` (size,
            sha256, detected type, a hex/printable preview), never decoded
            bytes.  Otherwise the whole stream when it fits, or a head and a
            tail joined by ``\\n... [truncated N of TOTAL bytes; sha256 <hex
            of the whole stream>] ...\\n``.
        """
        if self.binary:
            summary = byte_summary(self.total, self.hexdigest(), bytes(self.head))
            return _utf8_prefix(summary, budget)
        if self.total == len(self.head) + len(self.tail):
            whole = bytes(self.head + self.tail).decode("utf-8", errors="replace")
            if len(whole.encode("utf-8")) <= budget:
                return whole
            head_text = tail_text = whole
        else:
            head_text = self.head.decode("utf-8", errors="replace")
            tail_text = self.tail.decode("utf-8", errors="replace")
        widest = self._marker(self.total)
        avail = budget - len(widest.encode("utf-8"))
        if avail <= 0:
            return _utf8_prefix(widest, budget)
        head = _utf8_prefix(head_text, avail // 2)
        tail = _utf8_suffix(tail_text, avail - avail // 2)
        shown = len(head.encode("utf-8")) + len(tail.encode("utf-8"))
        return head + self._marker(max(self.total - shown, 0)) + tail

    def _marker(self, omitted: int) -> str:
        digest = self.hexdigest()
        return f"\n... [truncated {omitted} of {self.total} bytes; sha256 {digest}] ...\n"


def _utf8_prefix(text: str, n: int) -> str:
    """The longest prefix of ``text`` within ``n`` UTF-8 bytes (no split character)."""
    return text.encode("utf-8")[: max(n, 0)].decode("utf-8", errors="ignore")


def _utf8_suffix(text: str, n: int) -> str:
    """The longest suffix of ``text`` within ``n`` UTF-8 bytes (no split character)."""
    if n <= 0:
        return ""
    data = text.encode("utf-8")
    return data[max(len(data) - n, 0) :].decode("utf-8", errors="ignore")


def looks_binary(data: bytes) -> bool:
    """True iff the first :data:`BINARY_SNIFF_BYTES` bytes hold a NUL byte."""
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def is_binary_file(path: Path) -> bool:
    """Sniff the start of a regular file for a NUL byte.

    Raises:
        OSError: the file cannot be opened.
    """
    with path.open("rb") as fh:
        return looks_binary(fh.read(BINARY_SNIFF_BYTES))


def sha256_file(path: Path) -> tuple[str, int]:
    """Hash a file in 1 MiB chunks (memory stays bounded).

    Returns:
        ``(sha256 hex digest, size in bytes)``.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def walk_files(
    workspace: Path, top: Path, *, cancel: threading.Event | None = None
) -> Iterator[Path]:
    """Yield regular-file paths (unresolved) under ``top`` in sorted order.

    Never enters or yields ``.git``; never follows a symlinked directory; skips
    symlinked files whose target is outside the workspace.  Stops early when
    ``cancel`` is set (callers check it again to report the cancellation).

    Args:
        workspace: the workspace root.
        top: a resolved directory inside the workspace.
        cancel: polled once per directory.
    """
    root = workspace.resolve(strict=False)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        if cancel is not None and cancel.is_set():
            return
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_NAMES)
        base = Path(dirpath)
        for name in sorted(filenames):
            if name in _SKIPPED_NAMES:
                continue
            path = base / name
            # is_file follows symlinks: FIFOs, sockets and dangling links are
            # skipped (opening a FIFO would block the tool).
            if not path.is_file():
                continue
            if path.is_symlink() and not _points_inside(path, root):
                continue
            yield path


def _points_inside(link: Path, root: Path) -> bool:
    try:
        return link.resolve(strict=False).is_relative_to(root)
    except RuntimeError:  # symlink loop
        return False
