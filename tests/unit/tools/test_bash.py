"""Bash: exit codes, timeouts that kill the whole group, bounded capture, clean env."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.runner import run_tool


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (an unreaped zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pid: int, within_s: float = 5.0) -> bool:
    """Wait on observable state: SIGKILL is asynchronous, exit takes a moment."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.005)
    return _gone(pid)


def test_declarations() -> None:
    spec = Bash(timeout_s=30).spec
    assert not spec.read_only and not spec.concurrency_safe and not spec.idempotent
    assert spec.evidence_kind is EvidenceKind.MUTATE
    assert spec.timeout_s > 30  # the executor's outer limit leaves room for the kill
    assert spec.input_schema["properties"]["timeout"]["maximum"] == 30


def test_success_runs_in_the_workspace(ws: Path, ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "pwd; echo hello"}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.content == f"exit code: 0\nstdout:\n{ws}\nhello"
    ev = outcome.evidence
    assert ev["command"] == "pwd; echo hello"
    assert ev["exit_code"] == 0 and ev["timed_out"] is False
    assert ev["stdout_bytes"] == len(f"{ws}\nhello\n") and ev["stderr_bytes"] == 0
    assert ev["stdout_head"] == f"{ws}\nhello\n"
    assert isinstance(ev["duration_ms"], int)


def test_nonzero_exit_is_an_error_with_the_exit_code(ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "echo out; echo oops >&2; exit 3"}, ctx)
    assert outcome.status is ToolStatus.ERROR
    assert outcome.evidence["exit_code"] == 3
    assert outcome.evidence["error_code"] == "nonzero_exit"
    assert outcome.content == "exit code: 3\nstdout:\nout\nstderr:\noops"


def test_stdin_is_empty(ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "cat; echo done"}, ctx)
    assert outcome.evidence["stdout_head"] == "done\n"


def test_timeout_kills_the_whole_process_group(ws: Path, ctx: ToolContext) -> None:
    command = (
        "(sleep 30 & echo $! > grandchild.pid; wait) & "
        "sleep 30 & echo $! > child.pid; "
        "echo started; sleep 30"
    )
    bash = Bash(timeout_s=10, kill_grace_s=0.5)
    outcome = run_tool(bash, {"command": command, "timeout": 0.5}, ctx)
    assert outcome.status is ToolStatus.TIMED_OUT
    assert outcome.evidence["timed_out"] is True
    assert outcome.evidence["exit_code"] is None
    assert outcome.evidence["error_code"] == "timed_out"
    assert "started" in outcome.content
    assert 400 <= outcome.evidence["duration_ms"] < 5000
    for name in ("child.pid", "grandchild.pid"):
        pid = int((ws / name).read_text())
        assert _wait_gone(pid), f"{name} {pid} survived the timeout"


def test_background_children_do_not_outlive_a_normal_exit(ws: Path, ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "sleep 30 & echo $! > bg.pid; echo quick"}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.evidence["duration_ms"] < 5000
    assert _wait_gone(int((ws / "bg.pid").read_text()))


def test_cancel_kills_and_reports_cancelled(ws: Path, ctx: ToolContext) -> None:
    ctx.cancel.set()
    outcome = run_tool(Bash(kill_grace_s=0.5), {"command": "sleep 30"}, ctx)
    assert outcome.status is ToolStatus.CANCELLED
    assert outcome.evidence["exit_code"] is None
    assert outcome.evidence["timed_out"] is False


def test_huge_output_is_capped_and_memory_stays_bounded(ctx: ToolContext) -> None:
    bash = Bash(max_capture_bytes=256 * 1024)
    tracemalloc.start()
    try:
        outcome = run_tool(bash, {"command": "yes | head -c 50000000"}, ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.status is ToolStatus.OK
    assert outcome.evidence["stdout_bytes"] == 50_000_000
    assert len(outcome.content.encode()) <= ctx.max_output_bytes
    assert "truncated" in outcome.content and "of 50000000 bytes" in outcome.content
    assert outcome.content.splitlines()[2] == "y"
    assert outcome.content.endswith("y")
    assert peak < 8 * 1024 * 1024, f"peak traced memory {peak} bytes"


def test_environment_is_minimal_and_never_the_workers(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAHIDA_PROVIDER_API_KEY", "sk-must-not-leak")
    ctx = ToolContext(ws, "r", "c", "r:c", env={"PROJECT_FLAG": "on"})
    outcome = run_tool(Bash(), {"command": "env"}, ctx)
    names = {line.split("=", 1)[0] for line in outcome.content.splitlines()[2:]}
    assert "sk-must-not-leak" not in outcome.content
    assert "NAHIDA_PROVIDER_API_KEY" not in names
    assert {"PATH", "HOME", "LANG", "LC_ALL", "PROJECT_FLAG"} <= names
    assert "LC_ALL=C.UTF-8" in outcome.content


def test_timeout_argument_above_the_maximum_is_refused(ctx: ToolContext) -> None:
    outcome = run_tool(Bash(timeout_s=5), {"command": "true", "timeout": 6}, ctx)
    assert outcome.evidence["error_code"] == "invalid_arguments"
