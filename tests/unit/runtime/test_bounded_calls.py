"""No tool can hold a run past its timeout, a cancel or the wall-clock budget (issue 11 items 1, 5).

``Stuck`` stands for a tool blocked in the kernel (a FIFO open, a dead
mount): it ignores its cancel event.  Each test runs the session on a thread
and fails if the run does not end in time -- on the code before issue 11 it
never ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.constants import CANCEL_POLL_S
from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.ordering import Batch
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.fanout.bounded import abandoned_threads
from nahida_workers.runtime.fanout.calls import CallJob
from nahida_workers.runtime.fanout.executor import InlineExecutor
from nahida_workers.runtime.fanout.parallel import FanOutExecutor
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import (
    FakeClock,
    ListTaskQueue,
    ThreadRemoteTools,
    memory_runner,
    scripted_spec,
)
from nahida_workers.testing.tools import Sleep
from nahida_workers.tools.base import (
    Placement,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)

RELEASE = threading.Event()


class Stuck(Tool):
    """An exclusive tool that blocks until the test ends, whatever its cancel event says."""

    spec = ToolSpec(
        name="Stuck",
        description="blocks",
        input_schema={"type": "object"},
        timeout_s=0.5,
    )

    def execute(self, arguments: Any, ctx: ToolContext) -> ToolOutcome:
        RELEASE.wait(60)
        return ToolOutcome(ToolStatus.OK, "finally")


class SlowStuck(Stuck):
    spec = replace(Stuck.spec, name="SlowStuck", timeout_s=120.0)


class QuickSleep(Sleep):
    spec = replace(Sleep.spec, name="QuickSleep", timeout_s=0.4)


class RealClock(FakeClock):
    """Wall time (the wall-clock budget must pass while a tool is stuck)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.fixture(autouse=True)
def _release_stuck_threads() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def _runner(executor_kind: str, clock: FakeClock) -> SessionRunner:
    registry = ToolRegistry([Stuck(), SlowStuck(), QuickSleep()])
    executor: Any = (
        InlineExecutor(clock.now, grace_s=0.2)
        if executor_kind == "inline"
        else FanOutExecutor(now=clock.now, local_threads=4, grace_s=0.2)
    )
    return memory_runner(clock=clock, executor=executor, registry_for=lambda _spec: registry)


def _run_in_thread(runner: SessionRunner, spec: Any, workspace: Path) -> tuple[str, float]:
    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        spec, workspace=str(workspace)
    )
    started = time.monotonic()
    thread = threading.Thread(target=runner.run, args=(session.session_id,), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the session is still running: a stuck tool holds it"
    return session.session_id, time.monotonic() - started


def _spec(tool: str, **kw: Any) -> Any:
    return scripted_spec(
        [
            {"text": "go", "tool_calls": [{"id": "c1", "name": tool, "arguments": {}}]},
            {"text": "done"},
        ],
        tools=[tool],
        **kw,
    )


@pytest.mark.parametrize("executor_kind", ["inline", "fanout"])
def test_a_stuck_exclusive_tool_times_out_and_the_run_moves_on(
    executor_kind: str, tmp_path: Path
) -> None:
    runner = _runner(executor_kind, FakeClock())
    before = abandoned_threads()
    sid, _ = _run_in_thread(runner, _spec("Stuck"), tmp_path)
    run = runner.ledger.runs_of(sid)[0]
    assert run.terminal_state is not None
    result = next(e for e in runner.ledger.events(run.run_id) if e.type is EventType.TOOL_RESULT)
    assert result.payload["status"] == "timed_out"
    assert "unknown" in result.payload["content"]
    (receipt,) = runner.ledger.receipts(run.run_id)
    assert receipt.status is ToolStatus.TIMED_OUT and receipt.evidence["outcome"] == "unknown"
    assert abandoned_threads() == before + 1


@pytest.mark.parametrize("executor_kind", ["inline", "fanout"])
def test_cancel_takes_effect_while_a_tool_is_stuck(executor_kind: str, tmp_path: Path) -> None:
    runner = _runner(executor_kind, FakeClock())
    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        _spec("SlowStuck"), workspace=str(tmp_path)
    )

    def cancel() -> None:
        with runner.ledger.transaction() as tx:
            runner.ledger.request_cancel(tx, session.session_id, at=runner.clock.now())
        runner.clock.advance(CANCEL_POLL_S)  # type: ignore[attr-defined]  # the next poll is due

    threading.Timer(0.3, cancel).start()
    thread = threading.Thread(target=runner.run, args=(session.session_id,), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "cancel did not end a run whose tool is stuck"
    run = runner.ledger.runs_of(session.session_id)[0]
    assert run.terminal_state is not None and run.terminal_state.value == "cancelled"
    (result,) = [e for e in runner.ledger.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert result.payload["status"] == "aborted"


@pytest.mark.parametrize("executor_kind", ["inline", "fanout"])
def test_the_wall_clock_budget_takes_effect_while_a_tool_is_stuck(
    executor_kind: str, tmp_path: Path
) -> None:
    runner = _runner(executor_kind, RealClock())
    spec = _spec("SlowStuck", limits={"wall_clock_budget_s": 1.0})
    sid, took = _run_in_thread(runner, spec, tmp_path)
    run = runner.ledger.runs_of(sid)[0]
    assert (run.terminal_state.value, run.terminal_reason.value) == (  # type: ignore[union-attr]
        "incomplete",
        "budget_exhausted",
    )
    assert took < 20


# --- item 5: each call's deadline is its own -------------------------------------------


def _world(placement: str, local_threads: int) -> tuple[FanOutExecutor, ToolRegistry]:
    clock = FakeClock()
    tools = [QuickSleep()]
    registry = ToolRegistry(tools, placement={"QuickSleep": Placement(placement)})
    remote = ThreadRemoteTools(registry, clock.now) if placement == "remote" else None
    return FanOutExecutor(now=clock.now, local_threads=local_threads, remote=remote), registry


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_a_call_that_finished_in_time_is_not_timed_out_behind_a_slow_one(
    placement: str, tmp_path: Path
) -> None:
    executor, registry = _world(placement, 8)
    calls = (
        ToolCall(call_id="slow", name="QuickSleep", arguments={"ms": 3000}),
        ToolCall(call_id="fast", name="QuickSleep", arguments={"ms": 20}),
    )
    job = CallJob(run_id="r", workspace=tmp_path, epoch=1)
    out = executor.run_batch(Batch(calls, parallel=True), job, registry)
    assert [e.result.status for e in out] == [ToolStatus.TIMED_OUT, ToolStatus.OK]


def test_a_local_call_that_queued_counts_its_timeout_from_its_own_start(tmp_path: Path) -> None:
    executor, registry = _world("local", 1)  # one slot: the second call waits for the first
    calls = (
        ToolCall(call_id="first", name="QuickSleep", arguments={"ms": 250}),
        ToolCall(call_id="second", name="QuickSleep", arguments={"ms": 250}),
    )
    job = CallJob(run_id="r", workspace=tmp_path, epoch=1)
    out = executor.run_batch(Batch(calls, parallel=True), job, registry)
    assert [e.result.status for e in out] == [ToolStatus.OK, ToolStatus.OK]


# --- call threads are reused (issue 15) -------------------------------------------------


def _thread_of(fn: Any = None) -> tuple[threading.Thread, Any]:
    """Run ``fn`` (default: nothing) as a call; the thread it ran on and its result."""
    from nahida_workers.runtime.fanout.bounded import CallThread

    seen: list[threading.Thread] = []

    def job() -> Any:
        seen.append(threading.current_thread())
        return fn() if fn is not None else None

    call = CallThread(job, name="probe")
    result = call.result(5.0)
    assert call.future.done()
    return seen[0], result


def test_a_finished_call_thread_takes_the_next_call() -> None:
    """Starting a thread per call cost two context switches; a parked one is handed the next."""
    first, _ = _thread_of()
    deadline = time.monotonic() + 5
    while first not in _parked() and time.monotonic() < deadline:
        time.sleep(0.01)
    second, _ = _thread_of()
    assert second is first


def test_a_reused_call_thread_starts_each_call_with_a_fresh_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="fresh")

    def set_it() -> str:
        before = var.get()
        var.set("left behind")
        return before

    for _ in range(3):
        _, before = _thread_of(set_it)
        assert before == "fresh"


def test_a_call_thread_that_never_returns_is_never_handed_another_call() -> None:
    from nahida_workers.runtime.fanout.bounded import CallThread

    release = threading.Event()
    stuck_on: list[threading.Thread] = []

    def stuck() -> None:
        stuck_on.append(threading.current_thread())
        release.wait(10)

    call = CallThread(stuck, name="stuck")
    assert call.result(0.2) is None
    call.abandon()
    try:
        for _ in range(5):
            ran_on, _ = _thread_of()
            assert ran_on is not stuck_on[0]
    finally:
        release.set()


def _parked() -> list[threading.Thread]:
    from nahida_workers.runtime.fanout import bounded

    with bounded._idle_lock:
        return [w.thread for w in bounded._idle]
