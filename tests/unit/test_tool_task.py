"""The tool worker's task: its epoch check rides out a short ledger outage (bench/chaos.py).

Before, a PostgreSQL blip during the check failed the task with no result
pushed, and the session waited out the tool's whole timeout (30 s for Read)
for a call that never ran.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import nahida_workers.celery.tools as tool_body
import tasks.tools as tool_task
from nahida_workers.celery import process_of
from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.fanout.calls import CallJob, execution_from_json
from nahida_workers.settings import load_settings
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec


class FlakyLedger:
    """Answers ``get_session`` after ``failures`` LedgerUnavailableErrors."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    def get_session(self, session_id: str) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise LedgerUnavailableError("ledger unavailable: AdminShutdown")
        return self.inner.get_session(session_id)


class Channel:
    def __init__(self) -> None:
        self.pushed: dict[str, dict[str, Any]] = {}

    def push(self, task_id: str, value: dict[str, Any]) -> None:
        self.pushed[task_id] = value


def _world(tmp_path: Path, failures: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    runner = memory_runner()
    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        scripted_spec([{"text": "x"}]), workspace=str(tmp_path)
    )
    (tmp_path / "a.txt").write_text("hello\n")
    ledger = FlakyLedger(runner.ledger, failures)
    channel = Channel()
    fleet = SimpleNamespace(ledger=ledger, clock=FakeClock(), settings=load_settings())
    monkeypatch.setattr(process_of(tool_task.run_tool_call.app), "fleet", lambda: fleet)
    monkeypatch.setattr(tool_body, "result_channel", lambda _settings: channel)
    call = ToolCall(call_id="c1", name="Read", arguments={"path": "a.txt"})
    job = CallJob(
        run_id="r1",
        workspace=tmp_path,
        epoch=session.lease_epoch,
        max_output_bytes=4096,
        session_id=session.session_id,
        tools=("Read",),
        bash_timeout_s=10.0,
    )
    return ledger, channel, tool_body.tool_payload(call, job, executor_epoch=0)


def _result(channel: Channel, task_id: str) -> Any:
    return execution_from_json(channel.pushed[task_id]["execution"])


def test_the_epoch_check_retries_through_a_short_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, channel, payload = _world(tmp_path, failures=2, monkeypatch=monkeypatch)
    tool_task.run_tool_call.apply(args=[payload], task_id="t-short")
    execution = _result(channel, "t-short")
    assert ledger.calls == 3
    assert execution.result.status is ToolStatus.OK and "hello" in execution.result.content


def test_a_long_outage_answers_not_run_at_once_instead_of_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_body, "EPOCH_CHECK_RETRY_S", 0.3)
    _ledger, channel, payload = _world(tmp_path, failures=10**6, monkeypatch=monkeypatch)
    started = time.monotonic()
    tool_task.run_tool_call.apply(args=[payload], task_id="t-long")
    assert time.monotonic() - started < 3.0
    execution = _result(channel, "t-long")
    assert execution.result.status is ToolStatus.ERROR
    assert "ledger was unavailable" in execution.result.content
    assert execution.receipt.evidence["error_code"] == "ledger_unavailable"


def test_a_stuck_tool_cannot_hold_a_tool_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11 item 1: the remote placement is bounded by the tool's timeout too."""
    import threading
    from dataclasses import replace

    from nahida_workers.testing.tools import Sleep
    from nahida_workers.tools.base import ToolRegistry

    release = threading.Event()

    class StuckRead(Sleep):
        spec = replace(Sleep.spec, name="StuckRead", timeout_s=0.3)

        def execute(self, arguments: Any, ctx: Any) -> Any:
            release.wait(30)  # blocked in the kernel: ignores its cancel event
            raise AssertionError("released")

    _ledger, channel, payload = _world(tmp_path, failures=0, monkeypatch=monkeypatch)
    monkeypatch.setattr(tool_body, "_registry", lambda *_a: ToolRegistry([StuckRead()]))
    payload["call"] = {**payload["call"], "name": "StuckRead", "arguments": {"ms": 1}}
    started = time.monotonic()
    try:
        tool_task.run_tool_call.apply(args=[payload], task_id="t-stuck")
    finally:
        release.set()
    assert time.monotonic() - started < 10
    assert _result(channel, "t-stuck").result.status is ToolStatus.TIMED_OUT
