"""Fan-out semantics, the same for both placements (issue 3).

Every test runs with ``local`` placement (the session worker's thread pool)
and ``remote`` placement (the ``tools`` queue twin, :class:`ThreadRemoteTools`);
the real Celery queue is covered in tests/integration/test_tool_worker.py.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.constants import CANCEL_POLL_S
from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.ordering import plan_batches
from nahida_workers.core.transcript import project
from nahida_workers.providers.payloads import anthropic_messages, openai_messages
from nahida_workers.runtime.fanout.calls import CallJob
from nahida_workers.runtime.fanout.parallel import FanOutExecutor
from nahida_workers.testing import (
    FakeClock,
    ThreadRemoteTools,
    memory_runner,
    run_inline,
    scripted_spec,
)
from nahida_workers.testing.fleet import wait_for
from nahida_workers.testing.tools import ExclusiveProbe, Probe, Sleep
from nahida_workers.tools.base import Placement, ToolContext, ToolOutcome, ToolRegistry
from tests.conftest import load_case

PLACEMENTS = ["local", "remote"]
BLOCK_MS = 60_000  # far past the bound below: a broken timeout/abort/cancel fails, not flakes
BOUND_S = 15.0  # generous on a loaded 2-core machine; still 4x below BLOCK_MS


class QuickTimeout(Sleep):
    """Sleep with a 0.2 s timeout (B11's timeout variant)."""

    spec = replace(Sleep.spec, name="QuickTimeout", timeout_s=0.2)


class Blocker(Sleep):
    """:class:`Sleep` that records its start, so a test acts on state, not on a delay."""

    spec = replace(Sleep.spec, name="Blocker", timeout_s=120.0)
    started: ClassVar[list[str]] = []

    def execute(self, arguments: Any, ctx: ToolContext) -> ToolOutcome:
        """Record the start (the call id), then sleep like :class:`Sleep`."""
        Blocker.started.append(ctx.call_id)
        return super().execute(arguments, ctx)


def _world(placement: str) -> tuple[Any, ThreadRemoteTools | None, ToolRegistry]:
    clock = FakeClock()
    tools = [Probe(), ExclusiveProbe(), Sleep(), QuickTimeout(), Blocker()]
    registry = ToolRegistry(
        tools, placement={t.spec.name: Placement(placement) for t in tools if t.spec.may_fan_out}
    )
    remote = ThreadRemoteTools(registry, clock.now) if placement == "remote" else None
    executor = FanOutExecutor(now=clock.now, local_threads=16, remote=remote)
    runner = memory_runner(clock=clock, executor=executor, registry_for=lambda _spec: registry)
    return runner, remote, registry


def _tools_spec(calls: list[dict[str, Any]], **kw: Any) -> Any:
    return scripted_spec(
        [{"text": "fan out", "tool_calls": calls}, {"text": "done"}],
        tools=["Probe", "ExclusiveProbe", "Sleep", "QuickTimeout", "Blocker"],
        **kw,
    )


def _results(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type is EventType.TOOL_RESULT]


@pytest.mark.parametrize("placement", PLACEMENTS)
@settings(max_examples=20, deadline=None)
@given(
    flags=st.lists(st.booleans(), min_size=1, max_size=7),
    delays=st.lists(st.integers(min_value=0, max_value=25), min_size=7, max_size=7),
)
def test_any_mix_is_ordered_exclusive_parallel_and_answered_once(
    placement: str, flags: list[bool], delays: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """(a) results committed in provider order; (b) no exclusive call overlaps
    another; (c) the calls of one parallel batch overlap; (d) one result per call.
    Random delays give random completion orders."""
    Probe.log.intervals.clear()
    Probe.log.barriers.clear()
    names = ["Probe" if safe else "ExclusiveProbe" for safe in flags]
    calls = [ToolCall(call_id=f"c{i}", name=n) for i, n in enumerate(names)]
    batches = plan_batches(calls, lambda n: n == "Probe")
    where = {
        c.call_id: (b, len(batch.calls)) for b, batch in enumerate(batches) for c in batch.calls
    }
    script_calls = [
        {
            "id": c.call_id,
            "name": c.name,
            "arguments": {
                "batch": where[c.call_id][0],
                "parties": where[c.call_id][1],
                "ms": delays[i],
            },
        }
        for i, c in enumerate(calls)
    ]
    runner, _, _ = _world(placement)
    result = run_inline(_tools_spec(script_calls), tmp_path_factory.mktemp("ws"), runner=runner)

    results = _results(result.events)
    assert [e.call_id for e in results] == [c.call_id for c in calls]  # (a)
    assert [e.sequence for e in results] == sorted(e.sequence for e in results)
    assert all(e.payload["status"] == "ok" for e in results), [e.payload for e in results]
    assert sorted(r.call_id for r in result.receipts) == sorted(c.call_id for c in calls)  # (d)
    intervals = Probe.log.intervals
    for call in calls:  # (b)
        if call.name != "ExclusiveProbe":
            continue
        start, end = intervals[call.call_id]
        for other, (s2, e2) in intervals.items():
            assert other == call.call_id or e2 <= start or s2 >= end, (call.call_id, other)
    for batch in batches:  # (c)
        if batch.parallel and len(batch.calls) > 1:
            spans = [intervals[c.call_id] for c in batch.calls]
            assert max(s for s, _ in spans) < min(e for _, e in spans)
    assert result.run.terminal_state is not None and result.run.terminal_state.value == "completed"


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_b11_results_in_call_order_whatever_the_finish_order(
    placement: str, tmp_path: Path
) -> None:
    case = load_case("B11")
    finish_ms = case["input"]["tool_queue_completion_ms"]  # toolu_02 first, toolu_01 last
    scale = 0.2
    calls = [
        {"id": cid, "name": "Sleep", "arguments": {"ms": int(finish_ms[cid] * scale)}}
        for cid in ("toolu_01", "toolu_02", "toolu_03")
    ]
    runner, _, _ = _world(placement)
    result = run_inline(_tools_spec(calls), tmp_path, runner=runner)
    results = _results(result.events)
    assert [e.call_id for e in results] == ["toolu_01", "toolu_02", "toolu_03"]
    received = sorted(result.receipts, key=lambda r: r.finished_at)
    assert received  # finish order differs from call order; the ledger order does not

    messages = project(result.events[: results[-1].sequence])
    anthropic = anthropic_messages_for(messages, result.run.run_id)
    user = anthropic[2]
    assert user["role"] == "user"
    assert [b["type"] for b in user["content"]] == ["tool_result"] * 3
    assert [b["tool_use_id"] for b in user["content"]] == ["toolu_01", "toolu_02", "toolu_03"]
    openai = openai_messages_for(messages, result.run.run_id)
    tool_msgs = [m for m in openai if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["toolu_01", "toolu_02", "toolu_03"]
    assert openai.index(tool_msgs[0]) == 1 + next(
        i for i, m in enumerate(openai) if m["role"] == "assistant"
    )


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_b11_timeout_keeps_its_slot(placement: str, tmp_path: Path) -> None:
    calls = [
        {"id": "toolu_01", "name": "Sleep", "arguments": {"ms": 60}},
        {"id": "toolu_02", "name": "Sleep", "arguments": {"ms": 5}},
        {"id": "toolu_03", "name": "QuickTimeout", "arguments": {"ms": BLOCK_MS}},
    ]
    runner, remote, _ = _world(placement)
    started = time.monotonic()
    result = run_inline(_tools_spec(calls), tmp_path, runner=runner)
    assert time.monotonic() - started < BOUND_S, "the timeout, not the tool, bounds the wait"
    results = _results(result.events)
    assert [e.call_id for e in results] == ["toolu_01", "toolu_02", "toolu_03"]
    last = results[-1].payload
    assert (last["status"], last["is_error"]) == ("timed_out", True)
    assert last["content"].startswith("tool timed out")
    receipts = {r.call_id: r for r in result.receipts}
    assert receipts["toolu_03"].status is ToolStatus.TIMED_OUT
    assert receipts["toolu_01"].status is ToolStatus.OK
    if remote is not None:
        assert any("toolu_03" in t for t in remote.revoked)


def anthropic_messages_for(messages: list[Any], run_id: str) -> list[dict[str, Any]]:
    from nahida_workers.core.messages import ProviderRequest

    return anthropic_messages(
        ProviderRequest(run_id=run_id, turn_index=1, messages=tuple(messages))
    )


def openai_messages_for(messages: list[Any], run_id: str) -> list[dict[str, Any]]:
    from nahida_workers.core.messages import ProviderRequest

    return openai_messages(ProviderRequest(run_id=run_id, turn_index=1, messages=tuple(messages)))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_abort_mid_batch_bumps_the_epoch_and_aborts_what_is_outstanding(
    placement: str, tmp_path: Path
) -> None:
    runner, remote, registry = _world(placement)
    executor: FanOutExecutor = runner.executor  # type: ignore[assignment]
    Blocker.started.clear()
    polls = itertools.count(1)
    # gather polls should_abort before each wait: poll 1 collects "fast", poll 2
    # waits on "slow", poll 3 aborts -- while gather is blocked on a running call.
    job = CallJob(run_id="r", workspace=tmp_path, epoch=1, should_abort=lambda: next(polls) >= 3)
    calls = [
        ToolCall(call_id="fast", name="Sleep", arguments={"ms": 1}),
        ToolCall(call_id="slow", name="Blocker", arguments={"ms": BLOCK_MS}),
    ]
    pending = executor.start(calls, job, registry)
    fast = pending.slots[0]
    wait_for(  # "fast" finishes first: it arrived in the current epoch
        lambda: fast.thread.result(0) if fast.thread else remote.wait(fast.task_id, 0),  # type: ignore[union-attr, arg-type]
        timeout=BOUND_S,
        what='"fast" to finish',
    )
    wait_for(lambda: "slow" in Blocker.started, timeout=BOUND_S, what='"slow" to start')
    started = time.monotonic()
    out = executor.gather(pending, job)
    assert time.monotonic() - started < BOUND_S, "the abort, not the tool, ends the wait"
    assert next(polls) == 4, "aborted on the third poll, while waiting on the slow call"
    assert [e.result.status for e in out] == [ToolStatus.OK, ToolStatus.ABORTED]
    assert out[1].result.content.startswith("aborted")
    assert job.executor_epoch.value == 1
    if remote is not None:
        assert remote.revoked == [pending.slots[1].task_id]


def test_a_result_from_an_older_executor_epoch_is_never_a_success(tmp_path: Path) -> None:
    runner, remote, registry = _world("remote")
    assert remote is not None
    remote.epoch_override["late"] = 7  # the worker answers for another epoch
    executor: FanOutExecutor = runner.executor  # type: ignore[assignment]
    job = CallJob(run_id="r", workspace=tmp_path, epoch=1)
    calls = [
        ToolCall(call_id="late", name="Sleep", arguments={"ms": 1}),
        ToolCall(call_id="ok", name="Sleep", arguments={"ms": 1}),
    ]
    out = executor.gather(executor.start(calls, job, registry), job)
    assert [e.result.status for e in out] == [ToolStatus.ABORTED, ToolStatus.OK]
    assert out[0].receipt.status is ToolStatus.ABORTED


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_cancel_during_a_batch_ends_the_run_cancelled(placement: str, tmp_path: Path) -> None:
    runner, _, _ = _world(placement)
    Blocker.started.clear()
    calls = [{"id": f"s{i}", "name": "Blocker", "arguments": {"ms": BLOCK_MS}} for i in range(3)]
    spec = _tools_spec(calls)
    from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
    from nahida_workers.testing import ListTaskQueue

    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        spec, workspace=str(tmp_path)
    )

    def cancel() -> None:
        with runner.ledger.transaction() as tx:
            runner.ledger.request_cancel(tx, session.session_id, at=runner.clock.now())
        runner.clock.advance(CANCEL_POLL_S)  # type: ignore[attr-defined]  # the next poll is due

    def cancel_once_all_run() -> None:
        wait_for(lambda: len(Blocker.started) == 3, timeout=BOUND_S, what="all calls to start")
        cancel()

    threading.Thread(target=cancel_once_all_run, daemon=True).start()
    started = time.monotonic()
    runner.run(session.session_id)
    assert time.monotonic() - started < BOUND_S, "the cancel, not the tools, ends the run"
    assert sorted(Blocker.started) == ["s0", "s1", "s2"]
    run = runner.ledger.runs_of(session.session_id)[0]
    assert run.terminal_state is not None and run.terminal_state.value == "cancelled"
    statuses = [e.payload["status"] for e in _results(runner.ledger.events(run.run_id))]
    assert statuses == ["aborted"] * 3
