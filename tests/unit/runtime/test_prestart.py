"""Streaming pre-start (issue 3 item 6), on both placements."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, EvidenceKind, ToolStatus
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall
from nahida_workers.runtime.fanout.parallel import FanOutExecutor
from nahida_workers.testing import (
    FakeClock,
    ThreadRemoteTools,
    memory_runner,
    run_inline,
    scripted_spec,
)
from nahida_workers.tools.base import (
    Placement,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)

STARTS: dict[str, float] = {}


class Stamp(Tool):
    """Read-only, concurrency-safe: records when it started, then waits ``ms``."""

    spec = ToolSpec(
        name="Stamp",
        description="t",
        input_schema={"type": "object"},
        read_only=True,
        concurrency_safe=True,
        evidence_kind=EvidenceKind.OBSERVE,
        placement=Placement.LOCAL,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        STARTS[ctx.call_id] = time.monotonic()
        ctx.cancel.wait(int(arguments.get("ms", 0)) / 1000)
        return ToolOutcome(ToolStatus.OK, f"stamp {arguments.get('tag', '')}", {})


class SafeWriter(Stamp):
    """Concurrency-safe but NOT read-only: must never pre-start."""

    spec = replace(Stamp.spec, name="SafeWriter", read_only=False)


class Exclusive(Stamp):
    """Exclusive: closes pre-start for the rest of the turn."""

    spec = replace(Stamp.spec, name="Exclusive", concurrency_safe=False, read_only=False)


class StreamingProvider:
    """Announces calls early, keeps 'streaming' for ``tail_s``, then returns the turn.

    ``final`` may differ from what was announced (a retried stream that changed).
    """

    name = model = "streaming"

    def __init__(self, announce: list[ToolCall], final: list[ToolCall], tail_s: float) -> None:
        self.announce, self.final, self.tail_s = announce, final, tail_s
        self.returned_at = 0.0
        self.calls = 0

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        self.calls += 1
        if self.calls > 1:
            return ProviderTurn(text="done")
        for call in self.announce:
            if on_tool_call is not None:
                on_tool_call(call)
        time.sleep(self.tail_s)
        self.returned_at = time.monotonic()
        return ProviderTurn(text="working", tool_calls=tuple(self.final))


def _run(provider: StreamingProvider, tmp_path: Path, placement: str) -> Any:
    STARTS.clear()
    clock = FakeClock()
    tools = [Stamp(), SafeWriter(), Exclusive()]
    registry = ToolRegistry(tools, placement={"Stamp": Placement(placement)})
    remote = ThreadRemoteTools(registry, clock.now) if placement == "remote" else None
    runner = memory_runner(
        clock=clock,
        executor=FanOutExecutor(now=clock.now, remote=remote),
        provider_for=lambda _spec: provider,  # type: ignore[arg-type,return-value]
        registry_for=lambda _spec: registry,
    )
    spec = scripted_spec([{"text": "unused"}], tools=("Stamp", "SafeWriter", "Exclusive"))
    return run_inline(spec, tmp_path, runner=runner)


def _call(call_id: str, name: str = "Stamp", **args: Any) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=args)


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_a_safe_read_only_call_starts_before_the_stream_ends(
    placement: str, tmp_path: Path
) -> None:
    calls = [_call("a", ms=300), _call("b", ms=300)]
    provider = StreamingProvider(calls, calls, tail_s=0.3)
    started = time.monotonic()
    result = _run(provider, tmp_path, placement)
    elapsed = time.monotonic() - started
    assert STARTS["a"] < provider.returned_at and STARTS["b"] < provider.returned_at
    assert elapsed < 0.55, f"pre-start should overlap tool and stream ({elapsed:.2f}s)"
    results = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert [(e.call_id, e.payload["status"]) for e in results] == [("a", "ok"), ("b", "ok")]
    assert result.run.terminal_state.value == "completed"


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_nothing_after_an_exclusive_call_starts_early(placement: str, tmp_path: Path) -> None:
    calls = [_call("x", name="Exclusive"), _call("a", ms=10)]
    provider = StreamingProvider(calls, calls, tail_s=0.2)
    result = _run(provider, tmp_path, placement)
    assert STARTS["a"] > provider.returned_at and STARTS["x"] > provider.returned_at
    assert [e.call_id for e in result.events if e.type is EventType.TOOL_RESULT] == ["x", "a"]


def test_concurrency_safe_alone_never_pre_starts(tmp_path: Path) -> None:
    calls = [_call("w", name="SafeWriter", ms=10), _call("a", ms=10)]
    provider = StreamingProvider(calls, calls, tail_s=0.2)
    _run(provider, tmp_path, "local")
    assert STARTS["w"] > provider.returned_at, "a writer that is concurrency-safe must wait"
    assert STARTS["a"] > provider.returned_at, "and nothing after it starts early either"


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_a_pre_started_call_the_committed_turn_changed_is_aborted_and_run_fresh(
    placement: str, tmp_path: Path
) -> None:
    announced = [_call("a", tag="old", ms=50), _call("gone", tag="x", ms=50)]
    final = [_call("a", tag="new", ms=50)]  # same id, other input; "gone" vanished
    provider = StreamingProvider(announced, final, tail_s=0.1)
    result = _run(provider, tmp_path, placement)
    results = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert [(e.call_id, e.payload["status"], e.payload["content"]) for e in results] == [
        ("a", "ok", "stamp new")
    ]
    assert STARTS["a"] > provider.returned_at, "the fresh run of 'a' started after the turn"


def test_a_failed_turn_commit_aborts_what_was_pre_started(tmp_path: Path) -> None:
    from nahida_workers.errors import LedgerUnavailableError
    from nahida_workers.ledger.memory import MemoryLedger

    ledger = MemoryLedger()
    calls = [_call("a", ms=2000)]
    provider = StreamingProvider(calls, calls, tail_s=0.05)
    clock = FakeClock()
    registry = ToolRegistry([Stamp()], placement={"Stamp": Placement.LOCAL})
    executor = FanOutExecutor(now=clock.now)
    runner = memory_runner(
        ledger=ledger,
        clock=clock,
        executor=executor,
        provider_for=lambda _spec: provider,  # type: ignore[arg-type,return-value]
        registry_for=lambda _spec: registry,
    )
    runner.ledger_outage_s = 0.2  # the outage outlasts it: the turn is never committed
    commits = {"n": 0}

    def fail_turn_commit() -> None:
        commits["n"] += 1
        if commits["n"] >= 2:  # bump_epoch, then the turn's commit point (and retries)
            raise LedgerUnavailableError("database went away (test)")

    from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
    from nahida_workers.testing import ListTaskQueue

    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(
        scripted_spec([{"text": "x"}], tools=("Stamp",)), workspace=str(tmp_path)
    )
    ledger.commit_hook = fail_turn_commit
    started = time.monotonic()
    with pytest.raises(LedgerUnavailableError):
        runner.run(session.session_id)
    assert time.monotonic() - started < 1.5, "the 2 s pre-started call was cancelled"
    run = ledger.runs_of(session.session_id)[0]
    assert [e.type for e in ledger.events(run.run_id)] == [EventType.USER_INPUT]
    assert threading.active_count() < 50
