"""Bash: exit codes, timeouts that kill the whole group, bounded capture, clean env."""

from __future__ import annotations

import contextlib
import os
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.testing.fleet import marked_processes, wait_for
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.runner import run_tool


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique marker; whatever still carries it at the end is killed (no debris)."""
    mark = f"nahida-bash-{uuid.uuid4().hex[:8]}"
    yield mark
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


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


def test_timeout_kills_the_whole_process_group(ctx: ToolContext, marker: str) -> None:
    # Pids inside the sandbox are its own namespace's: the processes are found
    # on the host by the marker in their command line.
    command = (
        f"(bash -c 'sleep 30; : {marker}-grandchild' & wait) & "
        f"bash -c 'sleep 30; : {marker}-child' & "
        f"setsid bash -c 'sleep 30; : {marker}-escaped' & "
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
    wait_for(lambda: not marked_processes(marker), timeout=5, what="every child to die")


def test_background_children_do_not_outlive_a_normal_exit(ctx: ToolContext, marker: str) -> None:
    command = f"bash -c 'sleep 30; : {marker}' & setsid bash -c 'sleep 30; : {marker}' & echo quick"
    outcome = run_tool(Bash(), {"command": command}, ctx)
    assert outcome.status is ToolStatus.OK
    assert outcome.evidence["duration_ms"] < 5000
    wait_for(lambda: not marked_processes(marker), timeout=5, what="the background children to die")


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
