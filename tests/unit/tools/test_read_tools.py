"""Read, Glob, Grep and LS on real files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools import glob as glob_module
from nahida_workers.tools import grep as grep_module
from nahida_workers.tools.base import Placement, ToolContext
from nahida_workers.tools.glob import Glob, compile_glob
from nahida_workers.tools.grep import Grep
from nahida_workers.tools.ls import LS
from nahida_workers.tools.read import MAX_LINE_CHARS, Read
from nahida_workers.tools.runner import run_tool


def _tree(ws: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.mark.parametrize("tool", [Read(), Glob(), Grep(), LS()])
def test_read_only_declarations(tool: Read | Glob | Grep | LS) -> None:
    spec = tool.spec
    assert spec.read_only and spec.concurrency_safe and spec.idempotent and spec.may_fan_out
    assert spec.evidence_kind is EvidenceKind.OBSERVE
    local = {"Glob", "LS"}
    assert spec.placement is (Placement.LOCAL if spec.name in local else Placement.REMOTE)


# --- Read ---------------------------------------------------------------------------


def test_read_numbers_lines_and_records_evidence(ws: Path, ctx: ToolContext) -> None:
    body = "\n  first real line  \nsecond\nthird\n"
    _tree(ws, {"src/a.txt": body})
    outcome = run_tool(Read(), {"path": "src/a.txt"}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.content == "     1\t\n     2\t  first real line  \n     3\tsecond\n     4\tthird"
    assert outcome.evidence == {
        "path": "src/a.txt",
        "sha256": hashlib.sha256(body.encode()).hexdigest(),
        "size": len(body.encode()),
        "lines": 4,
        "first_line": "first real line",
    }


def test_read_offset_and_limit_page_through(ws: Path, ctx: ToolContext) -> None:
    _tree(ws, {"n.txt": "".join(f"line {i}\n" for i in range(1, 11))})
    outcome = run_tool(Read(), {"path": "n.txt", "offset": 4, "limit": 2}, ctx)
    lines = outcome.content.splitlines()
    assert lines[:2] == ["     4\tline 4", "     5\tline 5"]
    assert "offset=6" in lines[2]
    assert outcome.evidence["lines"] == 10
    past = run_tool(Read(), {"path": "n.txt", "offset": 50}, ctx)
    assert past.status is ToolStatus.OK and "past the end" in past.content


def test_read_cuts_very_long_lines_and_stops_at_the_output_cap(ws: Path) -> None:
    _tree(ws, {"long.txt": "x" * 10_000 + "\nshort\n", "many.txt": ("z" * 99 + "\n") * 1000})
    small = ToolContext(ws, "r", "c", "r:c", max_output_bytes=4096)
    long_out = run_tool(Read(), {"path": "long.txt"}, small)
    first, second = long_out.content.splitlines()
    assert first == "     1\t" + "x" * MAX_LINE_CHARS + " ... [line cut]"
    assert second == "     2\tshort"
    assert long_out.evidence["lines"] == 2
    many = run_tool(Read(), {"path": "many.txt"}, small)
    assert len(many.content.encode()) <= 4096
    assert "output limit reached" in many.content and "offset=" in many.content
    assert "output_truncated" not in many.evidence  # Read paged itself; nothing was cut blindly


def test_read_empty_file(ws: Path, ctx: ToolContext) -> None:
    _tree(ws, {"empty": ""})
    outcome = run_tool(Read(), {"path": "empty"}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.evidence["lines"] == 0 and outcome.evidence["first_line"] == ""


def test_read_binary_missing_and_directory_are_errors(ws: Path, ctx: ToolContext) -> None:
    blob = b"\x7fELF\x00\x00binary"
    _tree(ws, {"bin/tool": blob})
    binary = run_tool(Read(), {"path": "bin/tool"}, ctx)
    assert binary.status is ToolStatus.ERROR
    assert binary.evidence["error_code"] == "binary_file"
    assert binary.evidence["sha256"] == hashlib.sha256(blob).hexdigest()
    assert binary.evidence["size"] == len(blob)
    missing = run_tool(Read(), {"path": "nope.txt"}, ctx)
    assert missing.evidence["error_code"] == "not_found"
    directory = run_tool(Read(), {"path": "bin"}, ctx)
    assert directory.evidence["error_code"] == "is_directory"


def test_read_refuses_escapes(ws: Path, ctx: ToolContext) -> None:
    (ws / "leak").symlink_to(ws.parent / "outside" / "secret.txt")
    for path in ("../outside/secret.txt", str(ws.parent / "outside" / "secret.txt"), "leak"):
        outcome = run_tool(Read(), {"path": path}, ctx)
        assert outcome.evidence["error_code"] == "path_outside_workspace"
        assert "top secret" not in outcome.content


# --- Glob ---------------------------------------------------------------------------


def test_compile_glob_semantics() -> None:
    assert compile_glob("**/*.py").match("a.py")
    assert compile_glob("**/*.py").match("a/b/c.py")
    assert not compile_glob("*.py").match("a/b.py")
    assert compile_glob("src/**").match("src/x/y")
    assert compile_glob("t?st_[!x]*.py").match("test_a.py")
    assert not compile_glob("t?st_[!x]*.py").match("test_x.py")
    assert compile_glob("a[.py").match("a[.py")


def test_glob_matches_sorted_with_extension_counts(ws: Path, ctx: ToolContext) -> None:
    _tree(
        ws,
        {
            "b.py": "",
            "a.py": "",
            "pkg/c.py": "",
            "pkg/Makefile": "",
            "pkg/d.txt": "",
            ".git/config": "",
            ".git/hooks/x.py": "",
        },
    )
    outcome = run_tool(Glob(), {"pattern": "**/*"}, ctx)
    assert outcome.content.splitlines() == ["a.py", "b.py", "pkg/Makefile", "pkg/c.py", "pkg/d.txt"]
    assert outcome.evidence == {"count": 5, "by_extension": {"": 1, ".py": 3, ".txt": 1}}
    py = run_tool(Glob(), {"pattern": "*.py", "path": "pkg"}, ctx)
    assert py.content == "pkg/c.py"


def test_glob_caps_the_listing_but_counts_everything(
    ws: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(glob_module, "MAX_LISTED", 3)
    _tree(ws, {f"f{i}.md": "" for i in range(7)})
    outcome = run_tool(Glob(), {"pattern": "*.md"}, ctx)
    lines = outcome.content.splitlines()
    assert lines[:3] == ["f0.md", "f1.md", "f2.md"]
    assert "4 more" in lines[3]
    assert outcome.evidence == {"count": 7, "by_extension": {".md": 7}}


def test_glob_pattern_and_path_must_stay_inside(ws: Path, ctx: ToolContext) -> None:
    for args in (
        {"pattern": "../outside/*"},
        {"pattern": "/etc/*"},
        {"pattern": "*", "path": ".."},
    ):
        outcome = run_tool(Glob(), args, ctx)
        assert outcome.evidence["error_code"] == "path_outside_workspace", args
    assert run_tool(Glob(), {"pattern": "*"}, ctx).content == "No files matched."


# --- Grep ---------------------------------------------------------------------------


def test_grep_prints_path_line_and_counts(ws: Path, ctx: ToolContext) -> None:
    _tree(
        ws,
        {
            "a.py": "import os\nTODO: one\n",
            "sub/b.py": "x = 1\n# todo two\nTODO three\n",
            "notes.md": "TODO md\n",
            "img.png": b"TODO\x00\x01",
            ".git/COMMIT": "TODO git\n",
        },
    )
    outcome = run_tool(Grep(), {"pattern": r"TODO", "glob": "*.py"}, ctx)
    assert outcome.content.splitlines() == ["a.py:2:TODO: one", "sub/b.py:3:TODO three"]
    assert outcome.evidence == {"matches": 2, "files": 2, "files_scanned": 2, "truncated": False}
    every = run_tool(Grep(), {"pattern": "todo", "case_insensitive": True}, ctx)
    assert every.evidence == {"matches": 4, "files": 3, "files_scanned": 3, "truncated": False}
    one = run_tool(Grep(), {"pattern": "two", "path": "sub/b.py"}, ctx)
    assert one.content == "sub/b.py:2:# todo two"


def test_grep_stops_at_max_matches(ws: Path, ctx: ToolContext) -> None:
    _tree(ws, {"a.txt": "hit\n" * 10, "b.txt": "hit\n"})
    outcome = run_tool(Grep(), {"pattern": "hit", "max_matches": 3}, ctx)
    assert outcome.content.splitlines()[:3] == ["a.txt:1:hit", "a.txt:2:hit", "a.txt:3:hit"]
    assert "max_matches=3" in outcome.content.splitlines()[3]
    assert outcome.evidence == {"matches": 3, "files": 1, "files_scanned": 1, "truncated": True}


def test_grep_skips_large_files_and_cuts_long_lines(
    ws: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grep_module, "MAX_FILE_BYTES", 100)
    _tree(ws, {"big.txt": "needle\n" * 50, "wide.txt": "needle" + "w" * 1000 + "\n"})
    outcome = run_tool(Grep(), {"pattern": "needle"}, ctx)
    assert outcome.evidence["files_scanned"] == 0
    monkeypatch.setattr(grep_module, "MAX_FILE_BYTES", 10_000)
    outcome = run_tool(Grep(), {"pattern": "needle", "glob": "wide.txt"}, ctx)
    assert outcome.content == "wide.txt:1:needle" + "w" * (grep_module.MAX_LINE_CHARS - 6) + " ..."


def test_grep_invalid_regex_is_an_error(ctx: ToolContext) -> None:
    outcome = run_tool(Grep(), {"pattern": "(unclosed"}, ctx)
    assert outcome.status is ToolStatus.ERROR
    assert outcome.evidence["error_code"] == "invalid_pattern"


# --- LS -----------------------------------------------------------------------------


def test_ls_lists_sorted_with_markers(ws: Path, ctx: ToolContext) -> None:
    _tree(ws, {"b.txt": "", "a/x": "", ".hidden": ""})
    (ws / "link").symlink_to(ws / "b.txt")
    outcome = run_tool(LS(), {}, ctx)
    assert outcome.content.splitlines() == [".hidden", "a/", "b.txt", "link@"]
    assert outcome.evidence == {"path": ".", "entries": 4}
    assert run_tool(LS(), {"path": "a"}, ctx).content == "x"


def test_ls_errors(ws: Path, ctx: ToolContext) -> None:
    _tree(ws, {"f": ""})
    assert run_tool(LS(), {"path": "f"}, ctx).evidence["error_code"] == "not_a_directory"
    assert run_tool(LS(), {"path": "missing"}, ctx).evidence["error_code"] == "not_found"
    assert run_tool(LS(), {"path": ".."}, ctx).evidence["error_code"] == "path_outside_workspace"
