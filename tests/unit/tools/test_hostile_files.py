"""Hostile files meet every file tool: FIFOs, sockets, swapped symlinks, huge results.

Issue 11 items 1 (special files are refused before they are opened), 6
(output bounded by bytes) and 9 (a directory swapped for a symlink between
the check and the open cannot leak outside files).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import ToolStatus
from nahida_workers.tools import edit as edit_module
from nahida_workers.tools import grep as grep_module
from nahida_workers.tools import ls as ls_module
from nahida_workers.tools import read as read_module
from nahida_workers.tools import write as write_module
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome
from nahida_workers.tools.edit import MAX_EDIT_BYTES, Edit
from nahida_workers.tools.glob import Glob
from nahida_workers.tools.grep import Grep
from nahida_workers.tools.ls import LS
from nahida_workers.tools.read import Read
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.write import Write

#: Seconds a tool may take on a special file before the test calls it hung.
HANG_S = 5.0


def _bounded(
    tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext, fifo: Path | None
) -> ToolOutcome:
    """Run the tool on a thread; fail (and unblock it) if it hangs."""
    box: list[ToolOutcome] = []
    thread = threading.Thread(target=lambda: box.append(run_tool(tool, arguments, ctx)))
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        if fifo is not None:  # a writer end lets a blocked open (and read) return
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        thread.join(HANG_S)
        pytest.fail(f"{tool.spec.name} blocked on a special file for more than {HANG_S}s")
    return box[0]


@pytest.fixture
def fifo(ws: Path) -> Path:
    path = ws / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(ws: Path) -> Iterator[Path]:
    path = ws / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    yield path
    server.close()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (Read(), {"path": "pipe"}),
        (Write(), {"path": "pipe", "content": "x"}),
        (Edit(), {"path": "pipe", "old_string": "a", "new_string": "b"}),
        (Grep(), {"pattern": "x", "path": "pipe"}),
    ],
    ids=["Read", "Write", "Edit", "Grep"],
)
def test_a_fifo_is_refused_without_being_opened(
    tool: Tool, arguments: Mapping[str, Any], ws: Path, ctx: ToolContext, fifo: Path
) -> None:
    outcome = _bounded(tool, arguments, ctx, fifo)
    assert outcome.status is ToolStatus.ERROR
    assert outcome.evidence["error_code"] == "not_a_file", outcome.content
    assert fifo.exists() and not fifo.is_file()  # Write did not replace it either


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (Read(), {"path": "sock"}),
        (Write(), {"path": "sock", "content": "x"}),
        (Edit(), {"path": "sock", "old_string": "a", "new_string": "b"}),
    ],
    ids=["Read", "Write", "Edit"],
)
def test_a_socket_is_refused(
    tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext, unix_socket: Path
) -> None:
    outcome = _bounded(tool, arguments, ctx, None)
    assert outcome.evidence["error_code"] == "not_a_file", outcome.content


def test_walking_tools_skip_a_fifo(ws: Path, ctx: ToolContext, fifo: Path) -> None:
    (ws / "a.txt").write_text("x marks\n")
    grep = _bounded(Grep(), {"pattern": "x"}, ctx, fifo)
    assert grep.status is ToolStatus.OK and grep.evidence["files_scanned"] == 1
    assert _bounded(Glob(), {"pattern": "**/*"}, ctx, fifo).evidence["count"] == 1
    assert "pipe" in _bounded(LS(), {}, ctx, fifo).content


# --- symlink races (item 9) ------------------------------------------------------------


def _swap_after_check(
    monkeypatch: pytest.MonkeyPatch, module: Any, ws: Path, outside: Path
) -> None:
    """After the tool's path check, replace ``ws/sub`` by a symlink to ``outside``.

    This is the race an attacker wins 1,430 times in 20 s: the check saw a real
    directory, the open would see the symlink.
    """
    real: Callable[[Path, str], Path] = module.resolve_inside

    def check_then_swap(workspace: Path, user_path: str) -> Path:
        resolved = real(workspace, user_path)
        shutil.rmtree(ws / "sub")
        (ws / "sub").symlink_to(outside, target_is_directory=True)
        return resolved

    monkeypatch.setattr(module, "resolve_inside", check_then_swap)


@pytest.fixture
def sub(ws: Path) -> Path:
    (ws / "sub").mkdir()
    (ws / "sub" / "secret.txt").write_text("inside\n")
    return ws / "sub"


def test_read_cannot_be_raced_outside(
    ws: Path, ctx: ToolContext, sub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = ws.parent / "outside"
    _swap_after_check(monkeypatch, read_module, ws, outside)
    outcome = run_tool(Read(), {"path": "sub/secret.txt"}, ctx)
    assert "top secret" not in outcome.content
    assert outcome.evidence["error_code"] == "path_outside_workspace"


def test_write_cannot_be_raced_outside(
    ws: Path, ctx: ToolContext, sub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = ws.parent / "outside"
    _swap_after_check(monkeypatch, write_module, ws, outside)
    outcome = run_tool(Write(), {"path": "sub/secret.txt", "content": "pwned\n"}, ctx)
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert outcome.evidence["error_code"] == "path_outside_workspace"


def test_edit_cannot_be_raced_outside(
    ws: Path, ctx: ToolContext, sub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = ws.parent / "outside"
    _swap_after_check(monkeypatch, edit_module, ws, outside)
    arguments = {"path": "sub/secret.txt", "old_string": "top", "new_string": "low"}
    outcome = run_tool(Edit(), arguments, ctx)
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert outcome.evidence["error_code"] == "path_outside_workspace"


def test_ls_and_grep_cannot_be_raced_outside(
    ws: Path, ctx: ToolContext, sub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = ws.parent / "outside"
    _swap_after_check(monkeypatch, ls_module, ws, outside)
    listed = run_tool(LS(), {"path": "sub"}, ctx)
    assert "secret.txt" not in listed.content
    assert listed.evidence["error_code"] == "path_outside_workspace"
    shutil.rmtree(ws / "sub", ignore_errors=True)
    (ws / "sub").unlink(missing_ok=True)
    (ws / "sub").mkdir()
    (ws / "sub" / "secret.txt").write_text("inside\n")
    _swap_after_check(monkeypatch, grep_module, ws, outside)
    found = run_tool(Grep(), {"pattern": "secret", "path": "sub/secret.txt"}, ctx)
    assert "top secret" not in found.content
    assert found.evidence["error_code"] == "path_outside_workspace"


def test_symlinks_inside_the_workspace_still_work(ws: Path, ctx: ToolContext) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("hello\n")
    (ws / "link").symlink_to(ws / "real", target_is_directory=True)
    assert run_tool(Read(), {"path": "link/f.txt"}, ctx).status is ToolStatus.OK
    written = run_tool(Write(), {"path": "link/g.txt", "content": "new\n"}, ctx)
    assert written.status is ToolStatus.OK and (ws / "real" / "g.txt").read_text() == "new\n"


# --- bounded by bytes (item 6) -----------------------------------------------------------


def test_edit_replace_all_cannot_blow_a_file_up(ws: Path, ctx: ToolContext) -> None:
    target = ws / "small.txt"
    target.write_text("a" * 65536)
    arguments = {
        "path": "small.txt",
        "old_string": "a",
        "new_string": "b" * 1024,
        "replace_all": True,
    }
    outcome = run_tool(Edit(), arguments, ctx)
    assert outcome.evidence["error_code"] == "edit_too_large", outcome.content
    assert target.stat().st_size == 65536  # untouched


def test_edit_refuses_a_new_string_over_the_cap(ws: Path, ctx: ToolContext) -> None:
    (ws / "f.txt").write_text("x\n")
    arguments = {"path": "f.txt", "old_string": "x", "new_string": "y" * (MAX_EDIT_BYTES + 1)}
    outcome = run_tool(Edit(), arguments, ctx)
    assert outcome.evidence["error_code"] == "edit_too_large"
    assert (ws / "f.txt").read_text() == "x\n"


def test_read_checks_type_and_size_before_hashing(ws: Path, ctx: ToolContext) -> None:
    sparse = ws / "sparse.bin"
    with sparse.open("wb") as fh:
        fh.truncate(20 * 1024**3)  # 20 GiB of holes: hashing it would take minutes
    outcome = _bounded(Read(), {"path": "sparse.bin"}, ctx, None)
    assert outcome.evidence["error_code"] == "binary_file"
    assert outcome.evidence["size"] == 20 * 1024**3
    assert outcome.evidence["sha256"] is None  # too large to hash: not hashed


def test_read_of_a_large_text_file_is_bounded(
    ws: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_module, "MAX_HASH_BYTES", 1000)
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1000)))
    outcome = run_tool(Read(), {"path": "big.txt", "limit": 3}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.content.splitlines()[:3] == [
        "     1\tline 0",
        "     2\tline 1",
        "     3\tline 2",
    ]
    assert outcome.evidence["sha256"] is None and outcome.evidence["lines"] is None
    assert outcome.evidence["size"] == (ws / "big.txt").stat().st_size


# --- pathological patterns (item 2) ------------------------------------------------------

_CATASTROPHIC = r"""
import sys, time
from pathlib import Path
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.{module} import {tool}
ws = Path(sys.argv[1])
ctx = ToolContext(workspace=ws, run_id="r", call_id="c", idempotency_key="r:c")
started = time.monotonic()
outcome = run_tool({tool}(), {arguments}, ctx)
print(outcome.status.value, outcome.evidence.get("error_code"), file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("module", "tool", "arguments"),
    [
        ("grep", "Grep", {"pattern": "^(a+)+$"}),
        ("grep", "Grep", {"pattern": "(a|a)*b", "case_insensitive": True}),
        ("glob", "Glob", {"pattern": "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"}),
    ],
    ids=["grep-nested", "grep-alternation", "glob-stars"],
)
def test_a_catastrophic_pattern_finishes_at_once(
    ws: Path, module: str, tool: str, arguments: dict[str, Any]
) -> None:
    """In a subprocess: Python's ``re`` would hold the GIL for minutes on these."""
    import subprocess
    import sys

    (ws / "aaa.txt").write_text("a" * 40 + "!\n")
    (ws / ("a" * 60)).write_text("x\n")
    code = _CATASTROPHIC.format(module=module, tool=tool, arguments=repr(arguments))
    done = subprocess.run(
        [sys.executable, "-c", code, str(ws)], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.split()[:1] == ["ok"], done.stderr


def test_grep_refuses_what_re2_cannot_do_with_a_clear_error(ctx: ToolContext) -> None:
    outcome = run_tool(Grep(), {"pattern": r"(a)\1"}, ctx)
    assert outcome.evidence["error_code"] == "invalid_pattern"
    assert "RE2" in outcome.content


def test_an_os_error_is_a_tool_error_not_an_internal_one(ws: Path, ctx: ToolContext) -> None:
    outcome = run_tool(Write(), {"path": "n" * 300, "content": "x"}, ctx)
    assert outcome.evidence["error_code"] == "os_error"
    assert outcome.evidence["errno"] == "ENAMETOOLONG"
