"""Provider fallback bumps the executor epoch (issue 10 item 8, DESIGN.md section 3).

The primary provider streams a read-only call (pre-started at once), then
gives up; the fallback provider returns a turn with the same call -- same
id, same input.  The execution the failed provider started must end as an
``aborted`` result and never be committed as the call's success: the call
runs afresh under the new executor epoch.  Both placements.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, EvidenceKind, FailureCode, ToolStatus
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall
from nahida_workers.errors import ProviderError
from nahida_workers.providers.fallback import FallbackProvider
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

CALL = ToolCall(call_id="call_1", name="Probe", arguments={"q": "status"})


class Probe(Tool):
    """Read-only, concurrency-safe; answers ``execution N`` (N counts its runs)."""

    spec = ToolSpec(
        name="Probe",
        description="t",
        input_schema={"type": "object"},
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        evidence_kind=EvidenceKind.OBSERVE,
        placement=Placement.LOCAL,
    )
    runs = 0
    first_done = threading.Event()
    lock = threading.Lock()

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        with Probe.lock:
            Probe.runs += 1
            n = Probe.runs
        if n == 1:
            Probe.first_done.set()
        return ToolOutcome(ToolStatus.OK, f"execution {n}", {"n": n})


class Primary:
    """Streams CALL (reported early), waits until it ran, then fails for good."""

    name = model = "primary"

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        if request.turn_index > 0:
            return ProviderTurn(text="The probe says all is well.")
        if on_tool_call is not None:
            on_tool_call(CALL)
        assert Probe.first_done.wait(10), "the pre-started call never ran"
        raise ProviderError(
            "upstream gone", retryable=False, failure_code=FailureCode.PROVIDER_UNAVAILABLE
        )


class Secondary:
    """Returns the same call, as a fallback whose stream reported nothing early."""

    name = model = "secondary"

    def complete(self, request: ProviderRequest, **_: Any) -> ProviderTurn:
        return ProviderTurn(text="Probing.", tool_calls=(CALL,))


@pytest.mark.parametrize("placement", ["local", "remote"])
def test_a_result_started_before_a_fallback_is_aborted_never_a_success(
    placement: str, tmp_path: Path
) -> None:
    Probe.runs, Probe.first_done = 0, threading.Event()
    clock = FakeClock()
    registry = ToolRegistry([Probe()], placement={"Probe": Placement(placement)})
    remote = ThreadRemoteTools(registry, clock.now) if placement == "remote" else None
    runner = memory_runner(
        clock=clock,
        executor=FanOutExecutor(now=clock.now, remote=remote),
        provider_for=lambda _spec: FallbackProvider([Primary(), Secondary()]),  # type: ignore[list-item]
        registry_for=lambda _spec: registry,
    )
    result = run_inline(
        scripted_spec([{"text": "unused"}], tools=("Probe",)), tmp_path, runner=runner
    )
    assert result.terminal["state"] == "completed"
    (committed,) = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert committed.payload["status"] == "ok"
    assert committed.payload["content"] == "execution 2", (
        "the execution the failed provider started leaked as the call's result"
    )
    assert Probe.runs == 2
    (receipt,) = result.receipts
    assert receipt.evidence["n"] == 2
