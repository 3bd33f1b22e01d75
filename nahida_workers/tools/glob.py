"""Glob: find files by a path pattern with ``**`` support."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import re2

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.errors import PathOutsideWorkspaceError, ToolError
from nahida_workers.tools.base import Placement, Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.workspace import relative_to_workspace, resolve_inside, walk_files

__all__ = ["MAX_LISTED", "Glob", "GlobPattern", "compile_glob"]

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

#: Paths listed before the rest are summarised as a count.
MAX_LISTED = 1000

_DESCRIPTION = (
    "Find files by a glob pattern, e.g. `**/*.py` or `src/*/test_*.py`. `*` and `?` "
    "never cross a `/`; `**` as a whole segment matches any number of directories "
    "(zero included); `[abc]` is a character class. Hidden files match; `.git` is "
    "never searched. The pattern is relative to `path` (default: the workspace root). "
    "Returns matching file paths relative to the workspace, sorted, one per line."
)


def compile_glob(pattern: str) -> GlobPattern:
    """Compile a ``/``-separated glob into a matcher over POSIX relative paths.

    ``*`` matches within one segment, ``?`` one character other than ``/``,
    ``[...]`` a class (``[!...]`` negates), and a segment that is exactly
    ``**`` matches zero or more whole directories (a trailing ``**`` matches
    everything below).  Each segment is an RE2 expression matched against one
    path segment, so matching takes time linear in the path whatever the
    pattern (``*a*a*a*a*b`` cannot backtrack: DESIGN.md section 5).

    Raises:
        ToolError: code ``invalid_pattern`` for an empty pattern or a bad
            character class.
    """
    parts = [p for p in pattern.strip().split("/") if p not in ("", ".")]
    if not parts:
        raise ToolError("the glob pattern is empty", code="invalid_pattern")
    compiled: list[Any] = []
    for part in parts:
        if part == "**":
            if compiled and compiled[-1] is None:
                continue  # a/**/**/b is a/**/b
            compiled.append(None)
            continue
        try:
            compiled.append(re2.compile("(?s)" + _segment(part), _RE2_OPTIONS))
        except re2.error as exc:  # e.g. a reversed range such as [z-a]
            raise ToolError(
                f"invalid glob pattern {pattern!r}: {_re2_message(exc)}", code="invalid_pattern"
            ) from None
    return GlobPattern(pattern, tuple(compiled))


def _re2_message(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


class GlobPattern:
    """A compiled glob: one RE2 expression per segment, ``None`` for ``**``."""

    def __init__(self, pattern: str, parts: tuple[Any, ...]) -> None:
        self.pattern = pattern
        self._parts = parts

    def match(self, path: str) -> bool:
        """Whether the POSIX relative ``path`` matches the whole pattern.

        Dynamic programming over (pattern part, path segment): at most one
        full match per pair, no backtracking.
        """
        segs = path.split("/")
        n = len(segs)
        # ok[j]: the parts after the current one match segs[j:].
        ok = [False] * (n + 1)
        ok[n] = True
        last = len(self._parts) - 1
        for i in range(last, -1, -1):
            part = self._parts[i]
            now = [False] * (n + 1)
            if part is None and i == last:
                for j in range(n):  # a trailing ** takes one or more segments
                    now[j] = True
            elif part is None:
                reach = False
                for j in range(n, -1, -1):  # zero or more whole segments
                    reach = reach or ok[j]
                    now[j] = reach
            else:
                for j in range(n):
                    now[j] = ok[j + 1] and part.fullmatch(segs[j]) is not None
            ok = now
        return ok[0]


def _segment(part: str) -> str:
    """One path segment of a glob as RE2 text (fnmatch rules; a segment holds no ``/``)."""
    res: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        i += 1
        if c == "*":
            res.append("[^/]*")
        elif c == "?":
            res.append("[^/]")
        elif c == "[":
            j = i
            if j < n and part[j] in "!^":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            while j < n and part[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal '['
                res.append(re.escape(c))
                continue
            body = part[i:j]
            i = j + 1
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            # Escape what re would read as an escape, a nested set or a set operation.
            body = re.sub(r"([\\\[&~|^])", r"\\\1", body)
            if negate:
                body = "^" + body
            res.append(f"[{body}]")
        else:
            res.append(re.escape(c))
    return "".join(res)


def _check_pattern(pattern: str) -> None:
    if "\x00" in pattern or pattern.startswith("/") or ".." in PurePosixPath(pattern).parts:
        raise PathOutsideWorkspaceError(
            f"glob pattern {pattern!r} must be relative and must not contain '..' segments; "
            "use the path argument to choose the directory to search from"
        )


class Glob(Tool):
    """Match files under the workspace against a glob pattern.

    Arguments: ``{"pattern": str, "path"?: str}`` (``path`` is the directory
    the pattern is relative to).

    Evidence: ``count`` (all matches, also those not listed) and
    ``by_extension`` (``{".py": 12, "": 3}`` over all matches; the last suffix,
    ``""`` for none).  Error codes: ``invalid_pattern``,
    ``path_outside_workspace``, ``not_found``, ``not_a_directory``.
    """

    spec = ToolSpec(
        name="Glob",
        description=_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string", "description": "directory to search from"},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=30.0,
        # Cheaper inline than a Celery round trip (~4 ms).
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """List matches; see the class docstring for arguments and evidence."""
        pattern = str(arguments["pattern"])
        _check_pattern(pattern)
        user_dir = str(arguments.get("path", "."))
        top = resolve_inside(ctx.workspace, user_dir)
        if not top.exists():
            return ToolOutcome.error(f"directory not found: {user_dir}", code="not_found")
        if not top.is_dir():
            return ToolOutcome.error(f"{user_dir} is not a directory", code="not_a_directory")
        regex = compile_glob(pattern)
        matches: list[str] = []
        for path in walk_files(ctx.workspace, top, cancel=ctx.cancel):
            if regex.match(path.relative_to(top).as_posix()):
                matches.append(relative_to_workspace(ctx.workspace, path))
        if ctx.cancel.is_set():
            return ToolOutcome(ToolStatus.CANCELLED, "cancelled", {"error_code": "cancelled"})
        matches.sort()
        by_ext = Counter(PurePosixPath(m).suffix for m in matches)
        evidence = {"count": len(matches), "by_extension": dict(sorted(by_ext.items()))}
        if not matches:
            return ToolOutcome(ToolStatus.OK, "No files matched.", evidence)
        shown = matches[:MAX_LISTED]
        if len(matches) > MAX_LISTED:
            shown.append(
                f"... ({len(matches) - MAX_LISTED} more not shown; narrow the pattern or path)"
            )
        return ToolOutcome(ToolStatus.OK, "\n".join(shown), evidence)
