"""Write and Edit: atomic replacement, sha256 before/after, clear refusals."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import pytest

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.edit import Edit
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.write import Write, atomic_write


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("tool", [Write(), Edit()])
def test_declarations(tool: Write | Edit) -> None:
    spec = tool.spec
    assert not spec.read_only and not spec.concurrency_safe and not spec.idempotent
    assert spec.evidence_kind is EvidenceKind.MUTATE


def test_write_creates_parents_then_overwrites(ws: Path, ctx: ToolContext) -> None:
    created = run_tool(Write(), {"path": "deep/er/new.txt", "content": "héllo\n"}, ctx)
    assert created.status is ToolStatus.OK
    data = "héllo\n".encode()
    assert (ws / "deep" / "er" / "new.txt").read_bytes() == data
    assert created.evidence == {
        "path": "deep/er/new.txt",
        "sha256_before": None,
        "sha256_after": _sha(data),
        "bytes_written": len(data),
    }
    again = run_tool(Write(), {"path": "deep/er/new.txt", "content": "bye"}, ctx)
    assert again.evidence["sha256_before"] == _sha(data)
    assert again.evidence["sha256_after"] == _sha(b"bye")
    assert sorted(p.name for p in (ws / "deep" / "er").iterdir()) == ["new.txt"]


def test_write_refuses_escapes_and_touches_nothing_outside(ws: Path, ctx: ToolContext) -> None:
    outside = ws.parent / "outside"
    (ws / "out").symlink_to(outside, target_is_directory=True)
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    for path in ("../outside/x.txt", str(outside / "y.txt"), "out/z.txt", "leak.txt"):
        outcome = run_tool(Write(), {"path": path, "content": "pwned"}, ctx)
        assert outcome.evidence["error_code"] == "path_outside_workspace", path
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_write_through_an_inside_symlink_keeps_the_link(ws: Path, ctx: ToolContext) -> None:
    (ws / "real.txt").write_text("old")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    outcome = run_tool(Write(), {"path": "alias.txt", "content": "new"}, ctx)
    assert outcome.evidence["path"] == "real.txt"
    assert (ws / "alias.txt").is_symlink() and (ws / "real.txt").read_text() == "new"


def test_write_onto_a_directory_or_under_a_file_fails(ws: Path, ctx: ToolContext) -> None:
    (ws / "d").mkdir()
    (ws / "f").write_text("")
    assert run_tool(Write(), {"path": "d", "content": ""}, ctx).evidence["error_code"] == (
        "is_directory"
    )
    under = run_tool(Write(), {"path": "f/x.txt", "content": ""}, ctx)
    assert under.evidence["error_code"] == "not_a_directory"


def test_edit_replaces_once_with_hashes(ws: Path, ctx: ToolContext) -> None:
    before = b"def f():\n    return 1\n"
    (ws / "m.py").write_bytes(before)
    args = {"path": "m.py", "old_string": "return 1", "new_string": "return 2"}
    outcome = run_tool(Edit(), args, ctx)
    after = b"def f():\n    return 2\n"
    assert outcome.status is ToolStatus.OK
    assert (ws / "m.py").read_bytes() == after
    assert outcome.evidence == {
        "path": "m.py",
        "sha256_before": _sha(before),
        "sha256_after": _sha(after),
        "bytes_written": len(after),
        "replacements": 1,
    }


def test_edit_no_match_ambiguous_and_replace_all(ws: Path, ctx: ToolContext) -> None:
    (ws / "t.txt").write_text("a-a-a")
    miss = run_tool(Edit(), {"path": "t.txt", "old_string": "b", "new_string": "c"}, ctx)
    assert miss.evidence["error_code"] == "edit_no_match"
    amb = run_tool(Edit(), {"path": "t.txt", "old_string": "a", "new_string": "c"}, ctx)
    assert amb.evidence["error_code"] == "edit_ambiguous" and "3 times" in amb.content
    assert (ws / "t.txt").read_text() == "a-a-a"  # refusals change nothing
    args = {"path": "t.txt", "old_string": "a", "new_string": "c", "replace_all": True}
    every = run_tool(Edit(), args, ctx)
    assert (ws / "t.txt").read_text() == "c-c-c"
    assert every.evidence["replacements"] == 3


def test_edit_other_refusals(ws: Path, ctx: ToolContext) -> None:
    (ws / "b.bin").write_bytes(b"x\x00y")
    (ws / "s.txt").write_text("same")

    def code(args: Mapping[str, object]) -> object:
        return run_tool(Edit(), args, ctx).evidence["error_code"]

    assert code({"path": "nope", "old_string": "a", "new_string": "b"}) == "not_found"
    assert code({"path": "b.bin", "old_string": "x", "new_string": "z"}) == "binary_file"
    assert code({"path": "s.txt", "old_string": "same", "new_string": "same"}) == "edit_noop"
    assert code({"path": ".", "old_string": "a", "new_string": "b"}) == "is_directory"
    escape = {"path": "../outside/secret.txt", "old_string": "top", "new_string": "no"}
    assert code(escape) == "path_outside_workspace"


def test_edit_keeps_bytes_that_are_not_utf8(ws: Path, ctx: ToolContext) -> None:
    (ws / "latin.txt").write_bytes(b"caf\xe9 = 1\n")
    run_tool(Edit(), {"path": "latin.txt", "old_string": "1", "new_string": "2"}, ctx)
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9 = 2\n"


def test_atomic_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.sh"
    target.write_text("old")
    target.chmod(0o750)
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.sh"]  # no temp file left
