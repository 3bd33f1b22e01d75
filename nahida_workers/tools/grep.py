"""Grep: search file contents with an RE2 regular expression (linear time).

A pathological regex cannot freeze a process: Python's ``re`` backtracks --
``^(a+)+$`` against a long line of ``a`` followed by ``!`` runs for minutes
holding the GIL, freezing every thread of the worker (its lease heartbeat
included).  RE2 matches in time linear in the text whatever the pattern, so no
pattern can freeze a process; patterns RE2 does not support (backreferences,
look-around) are refused with an error the model can act on.  Files are opened
through :mod:`~nahida_workers.tools.safe_open` (no FIFO is ever opened, no
symlink race).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import re2

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.errors import PathOutsideWorkspaceError, ToolError
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.glob import compile_glob
from nahida_workers.tools.safe_open import WorkspaceFs, workspace_fs
from nahida_workers.tools.workspace import (
    looks_binary,
    relative_to_workspace,
    resolve_inside,
    walk_files,
)

__all__ = ["DEFAULT_MAX_MATCHES", "MAX_FILE_BYTES", "MAX_LINE_CHARS", "Grep"]

#: Matches printed when the model gives no ``max_matches``.
DEFAULT_MAX_MATCHES = 500

#: Files larger than this are skipped (bytes).
MAX_FILE_BYTES = 2 * 1024 * 1024

#: Characters of a matching line printed before it is cut.
MAX_LINE_CHARS = 300

_DESCRIPTION = (
    "Search file contents with a regular expression in RE2 syntax (like Python's re "
    "module, without backreferences or look-around), one line at a time. Prints "
    "`path:line_number:line` for each matching line, "
    "paths relative to the workspace. `path` is a file or a directory to search "
    "(default: the workspace root); `glob` filters file names (e.g. `*.py`, or "
    "`src/**/*.ts` when it contains a `/`). Skips .git, binary files and files over "
    f"{MAX_FILE_BYTES // (1024 * 1024)} MiB. Stops after max_matches "
    f"(default {DEFAULT_MAX_MATCHES})."
)


class Grep(Tool):
    """Regex search over the workspace's text files.

    Arguments: ``{"pattern": str, "path"?: str, "glob"?: str,
    "case_insensitive"?: bool, "max_matches"?: int}``.  A ``glob`` without
    ``/`` matches file names; with ``/`` it matches paths relative to
    ``path``.  An explicit file ``path`` is searched whatever ``glob`` says.

    Evidence: ``matches`` (lines printed), ``files`` (files with a match),
    ``files_scanned``, ``truncated`` (stopped at ``max_matches``).  Error
    codes: ``invalid_pattern`` (not RE2 syntax), ``not_found``, ``not_a_file``
    (a FIFO, socket or device asked for by path; never opened; walked ones are
    skipped), ``path_outside_workspace``.
    """

    spec = ToolSpec(
        name="Grep",
        description=_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string"},
                "glob": {"type": "string", "minLength": 1},
                "case_insensitive": {"type": "boolean"},
                "max_matches": {"type": "integer", "minimum": 1, "maximum": 10000},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=60.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Search; see the class docstring for arguments and evidence."""
        regex = _compile(arguments)
        if isinstance(regex, ToolOutcome):
            return regex
        max_matches = int(arguments.get("max_matches", DEFAULT_MAX_MATCHES))
        user_path = str(arguments.get("path", "."))
        top = resolve_inside(ctx.workspace, user_path)
        files = _files(arguments, ctx, top, user_path)
        if isinstance(files, ToolOutcome):
            return files
        scan = _Scan(regex, max_matches)
        with workspace_fs(ctx.workspace) as fs:
            for path in files:
                if ctx.cancel.is_set() or scan.truncated:
                    break
                try:
                    lines = _text_lines(fs, ctx.workspace, path)
                except ToolError:
                    if path == top:  # the one file asked for: say why
                        raise
                    continue
                if lines is not None:
                    scan.file(relative_to_workspace(ctx.workspace, path), lines)
        if ctx.cancel.is_set():
            return ToolOutcome(ToolStatus.CANCELLED, "cancelled", {"error_code": "cancelled"})
        return scan.outcome()


def _compile(arguments: Mapping[str, Any]) -> Any:
    """The compiled RE2 pattern, or an ``invalid_pattern`` error outcome."""
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not arguments.get("case_insensitive", False)
    pattern = str(arguments["pattern"])
    try:
        return re2.compile(pattern, options)
    except (re2.error, UnicodeError) as exc:
        arg = exc.args[0] if exc.args else exc
        why = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
        return ToolOutcome.error(
            f"invalid regular expression {pattern!r}: {why} (RE2 syntax: no "
            "backreferences or look-around)",
            code="invalid_pattern",
        )


def _files(
    arguments: Mapping[str, Any], ctx: ToolContext, top: Path, user_path: str
) -> Iterable[Path] | ToolOutcome:
    """The files to search under ``top`` (filtered by ``glob``), or an error outcome."""
    if not top.exists():
        return ToolOutcome.error(f"path not found: {user_path}", code="not_found")
    if top.is_file():
        return [top]
    if not top.is_dir():
        return ToolOutcome.error(f"{user_path} is not a regular file", code="not_a_file")
    name_filter = arguments.get("glob")
    files: Iterable[Path] = walk_files(ctx.workspace, top, cancel=ctx.cancel)
    if name_filter is not None:
        files = _filtered(files, top, str(name_filter))
    return files


class _Scan:
    """Matches gathered in file and line order, up to ``max_matches``."""

    def __init__(self, regex: Any, max_matches: int) -> None:
        self.regex = regex
        self.max_matches = max_matches
        self.out: list[str] = []
        self.files_matched = self.files_scanned = 0
        self.truncated = False

    def file(self, rel: str, lines: list[str]) -> None:
        """Scan one file's lines."""
        self.files_scanned += 1
        hit = False
        for lineno, line in enumerate(lines, start=1):
            if self.regex.search(line) is None:
                continue
            if len(self.out) >= self.max_matches:
                self.truncated = True
                break
            hit = True
            shown = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " ..."
            self.out.append(f"{rel}:{lineno}:{shown}")
        self.files_matched += hit

    def outcome(self) -> ToolOutcome:
        """The tool's answer and evidence."""
        evidence = {
            "matches": len(self.out),
            "files": self.files_matched,
            "files_scanned": self.files_scanned,
            "truncated": self.truncated,
        }
        if not self.out:
            return ToolOutcome(ToolStatus.OK, "No matches found.", evidence)
        out = self.out
        if self.truncated:
            out = [
                *out,
                f"... (stopped at max_matches={self.max_matches}; narrow the pattern or path)",
            ]
        return ToolOutcome(ToolStatus.OK, "\n".join(out), evidence)


def _filtered(files: Iterable[Path], top: Path, name_glob: str) -> Iterable[Path]:
    regex = compile_glob(name_glob)
    by_path = "/" in name_glob
    for path in files:
        subject = path.relative_to(top).as_posix() if by_path else path.name
        if regex.match(subject):
            yield path


def _text_lines(fs: WorkspaceFs, workspace: Path, path: Path) -> list[str] | None:
    r"""The file's lines (split on ``\\n``, ``\\r`` stripped), or None to skip it.

    ``path`` may be a symlink inside the workspace: its resolved target is
    opened, through descriptors.  Skipped: unreadable files, files over
    :data:`MAX_FILE_BYTES`, binary files.

    Raises:
        ToolError: the path is a FIFO, socket or device (``not_a_file``), or
            it changed while being opened (a symlink race).
    """
    try:
        rel = relative_to_workspace(workspace, path.resolve(strict=False))
    except (ValueError, RuntimeError):  # now points outside, or a loop
        raise PathOutsideWorkspaceError(f"{path.name} points outside the workspace") from None
    try:
        fd = fs.open_regular(rel)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fd).st_size > MAX_FILE_BYTES:
            return None
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES or looks_binary(data):
        return None
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]
