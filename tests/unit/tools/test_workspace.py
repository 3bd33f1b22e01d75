"""Path confinement, output capping and the file helpers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nahida_workers.errors import PathOutsideWorkspaceError, ToolError
from nahida_workers.tools.workspace import (
    BoundedCapture,
    cap_text,
    is_binary_file,
    looks_binary,
    relative_to_workspace,
    resolve_inside,
    sha256_file,
    walk_files,
)

# --- resolve_inside: every escape route --------------------------------------


def test_relative_path_resolves_inside(ws: Path) -> None:
    assert resolve_inside(ws, "a/b.txt") == ws / "a" / "b.txt"
    assert resolve_inside(ws, "") == ws
    assert resolve_inside(ws, ".") == ws
    assert resolve_inside(ws, "a/../b") == ws / "b"


def test_dotdot_that_leaves_is_refused(ws: Path) -> None:
    with pytest.raises(PathOutsideWorkspaceError, match=r"'\.\.' segments"):
        resolve_inside(ws, "../outside/secret.txt")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_inside(ws, "a/../../ws-sibling")


def test_absolute_path_inside_is_fine_outside_is_refused(ws: Path) -> None:
    assert resolve_inside(ws, str(ws / "x.py")) == ws / "x.py"
    with pytest.raises(PathOutsideWorkspaceError, match="absolute path"):
        resolve_inside(ws, "/etc/passwd")


def test_symlinked_file_pointing_outside_is_refused(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    with pytest.raises(PathOutsideWorkspaceError, match="symlink"):
        resolve_inside(ws, "link.txt")


def test_dangling_symlink_pointing_outside_is_refused(ws: Path) -> None:
    (ws / "future.txt").symlink_to(ws.parent / "outside" / "not-yet.txt")
    with pytest.raises(PathOutsideWorkspaceError, match="symlink"):
        resolve_inside(ws, "future.txt")


def test_symlinked_dir_pointing_outside_is_refused(ws: Path) -> None:
    (ws / "out").symlink_to(ws.parent / "outside", target_is_directory=True)
    with pytest.raises(PathOutsideWorkspaceError, match="symlink"):
        resolve_inside(ws, "out/secret.txt")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_inside(ws, "out/new/file.txt")


def test_symlink_inside_the_workspace_is_fine(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("x")
    (ws / "alias").symlink_to(ws / "real", target_is_directory=True)
    (ws / "f-link").symlink_to(ws / "real" / "f.txt")
    assert resolve_inside(ws, "alias/f.txt") == ws / "real" / "f.txt"
    assert resolve_inside(ws, "f-link") == ws / "real" / "f.txt"


def test_symlinked_workspace_root_is_fine(ws: Path) -> None:
    root_link = ws.parent / "ws-link"
    root_link.symlink_to(ws, target_is_directory=True)
    assert resolve_inside(root_link, "a.txt") == ws / "a.txt"


def test_nul_byte_is_refused(ws: Path) -> None:
    with pytest.raises(PathOutsideWorkspaceError, match="NUL"):
        resolve_inside(ws, "a\x00b")


def test_symlink_loop_is_a_tool_error(ws: Path) -> None:
    (ws / "loop").symlink_to(ws / "loop")
    with pytest.raises(ToolError) as info:
        resolve_inside(ws, "loop")
    assert info.value.code == "symlink_loop"


def test_relative_to_workspace(ws: Path) -> None:
    assert relative_to_workspace(ws, ws / "a" / "b") == "a/b"
    assert relative_to_workspace(ws, ws) == "."


# --- cap_text ---------------------------------------------------------------------


def test_cap_text_keeps_text_that_fits() -> None:
    assert cap_text("héllo", 6) == ("héllo", {})


def test_cap_text_keeps_head_and_tail_with_marker() -> None:
    text = "A" * 5000 + "B" * 5000
    capped, evidence = cap_text(text, 1000)
    assert len(capped.encode()) <= 1000
    assert capped.startswith("A" * 100) and capped.endswith("B" * 100)
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert evidence == {"truncated": True, "size": 10000, "sha256": digest}
    head, _, rest = capped.partition("\n... [truncated ")
    omitted, _, tail = rest.partition(" bytes; sha256 ")
    tail = tail.split("] ...\n", 1)[1]
    assert int(omitted) == 10000 - len(head) - len(tail)
    assert head == "A" * len(head) and tail == "B" * len(tail)
    assert f"sha256 {digest}] ...\n" in capped


def test_cap_text_cuts_on_character_boundaries() -> None:
    text = "é" * 3000  # 2 bytes each
    capped, _ = cap_text(text, 501)
    assert len(capped.encode()) <= 501
    assert "\ufffd" not in capped
    assert capped.startswith("é") and capped.endswith("é")


def test_cap_text_smaller_than_the_marker_keeps_a_head() -> None:
    capped, evidence = cap_text("x" * 500, 10)
    assert capped == "x" * 10
    assert evidence["size"] == 500


@given(st.text(), st.integers(min_value=0, max_value=400))
def test_cap_text_never_exceeds_the_cap(text: str, max_bytes: int) -> None:
    capped, evidence = cap_text(text, max_bytes)
    size = len(text.encode("utf-8", errors="replace"))
    assert len(capped.encode("utf-8", errors="replace")) <= max(max_bytes, 0)
    assert bool(evidence) == (size > max_bytes)
    if not evidence:
        assert capped == text


# --- file helpers -----------------------------------------------------------------


def test_binary_detection_and_hash(tmp_path: Path) -> None:
    assert looks_binary(b"abc\x00def")
    assert not looks_binary(b"plain text\n")
    assert not looks_binary(b"a" * 9000 + b"\x00")  # only the first 8 KiB count
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x89PNG\x00\x01" * 1000)
    assert is_binary_file(blob)
    assert sha256_file(blob) == (hashlib.sha256(blob.read_bytes()).hexdigest(), 6000)


def test_walk_files_skips_git_fifos_and_escaping_symlinks(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref")
    (ws / "pkg").mkdir()
    (ws / "pkg" / "a.py").write_text("")
    (ws / "wt").mkdir()
    (ws / "wt" / ".git").write_text("gitdir: elsewhere")  # a worktree pointer file
    (ws / "esc").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "ok").symlink_to(ws / "pkg" / "a.py")
    (ws / "outdir").symlink_to(ws.parent / "outside", target_is_directory=True)
    os.mkfifo(ws / "pipe")
    found = [p.relative_to(ws).as_posix() for p in walk_files(ws, ws)]
    assert found == ["ok", "pkg/a.py"]


def test_bounded_capture_keeps_head_tail_count_and_hash() -> None:
    stream = b"a" * 60 + b"b" * 1000 + b"c" * 60
    cap = BoundedCapture(100)
    for i in range(0, len(stream), 7):
        cap.feed(stream[i : i + 7])
    assert (len(cap.head), len(cap.tail), cap.total) == (50, 50, len(stream))
    assert bytes(cap.head) == b"a" * 50 and bytes(cap.tail) == b"c" * 50
    assert cap.hexdigest() == hashlib.sha256(stream).hexdigest()
    full = cap.render(10_000)
    assert full.startswith("a" * 50) and full.endswith("c" * 50)
    assert f"[truncated 1020 of 1120 bytes; sha256 {cap.hexdigest()}]" in full
    for budget in (0, 50, 150, 200):
        assert len(cap.render(budget).encode()) <= budget


def test_bounded_capture_renders_small_streams_whole() -> None:
    cap = BoundedCapture(1024)
    cap.feed("héllo\n".encode())
    assert cap.render(100) == "héllo\n"
    cut = cap.render(3)
    assert len(cut.encode()) <= 3
