"""What the runtime reports after each commit: user-visible events and counters.

The ledger is written first; only then does a watcher see the event and a
counter move (DESIGN.md section 3: results are committed before anyone sees
them).  One :class:`Observer` per run delivery.
"""

from __future__ import annotations

from collections.abc import Sequence

from nahida_workers import metrics
from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    ReasonCode,
)
from nahida_workers.core.loop import Finish
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.state import RunState
from nahida_workers.runtime.observe.channel import (
    ChannelPolicy,
    EventSink,
    VisibleEvent,
    VisibleKind,
    allowed,
)

__all__ = ["Observer"]

#: Characters of a tool result shown in a ``tool_result`` event.
RESULT_PREVIEW_CHARS = 200


class Observer:
    """Emits one run's user-visible events through its channel policy, and counts."""

    def __init__(
        self,
        sink: EventSink,
        policy: ChannelPolicy,
        *,
        session_id: str,
        run_id: str,
        trace_id: str,
        contract: CompletionContract,
    ) -> None:
        self._sink = sink
        self._policy = policy
        self._session_id = session_id
        self._run_id = run_id
        self._trace_id = trace_id
        self._contract = contract

    def _emit(self, kind: VisibleKind, **data: object) -> None:
        if allowed(self._policy, kind):
            self._sink.emit(VisibleEvent(kind, self._session_id, self._run_id, dict(data)))

    def committed(self, events: Sequence[Event]) -> None:
        """Events just committed: commentary, tool results, corrections, anomalies."""
        for event in events:
            payload = event.payload
            if event.type is EventType.ASSISTANT_OUTPUT and payload.get("call_ids"):
                if str(payload.get("text", "")).strip():
                    self._emit(VisibleKind.COMMENTARY, text=payload.get("text"))
            elif event.type is EventType.TOOL_RESULT:
                self._emit(
                    VisibleKind.TOOL_RESULT,
                    call_id=event.call_id,
                    tool=payload.get("name"),
                    status=payload.get("status"),
                    preview=str(payload.get("content", ""))[:RESULT_PREVIEW_CHARS],
                )
            elif event.type is EventType.PROVIDER_ANOMALY:
                metrics.PROVIDER_PROTOCOL_INVALID.labels(str(payload.get("code"))).inc()
            elif event.type is EventType.CONTROL and payload.get("kind") == "correction":
                stage = str(payload.get("stage"))
                metrics.CORRECTION_TURNS.labels(stage).inc()
                if stage == "evidence":
                    metrics.RECEIPT_MISSING.labels(self._contract.evidence.value).inc()
            elif event.type is EventType.CONTROL and payload.get("kind") in ("bound", "truncation"):
                metrics.CORRECTION_TURNS.labels(f"bound:{payload.get('bound', 'truncation')}").inc()

    def tools_started(self, calls: Sequence[ToolCall]) -> None:
        """A batch of committed calls starts."""
        for call in calls:
            self._emit(VisibleKind.TOOL_STARTED, call_id=call.call_id, tool=call.name)

    def protocol_error(self) -> None:
        """A provider turn failed as a protocol error."""
        metrics.PROVIDER_PROTOCOL_INVALID.labels("protocol_error").inc()

    def sealed(self, state: RunState, finish: Finish) -> None:
        """The terminal event is committed: final text, done, counters."""
        metrics.RUNS.labels(finish.state.value, finish.reason.value).inc()
        if not state.calls:
            metrics.TERMINAL_WITHOUT_TOOL_CALLS.labels(finish.state.value).inc()
        if finish.reason is ReasonCode.CLAIM_WITHOUT_RECEIPT:
            metrics.CLAIM_RECEIPT_MISMATCH.inc()
        if finish.reason is ReasonCode.EVIDENCE_MISSING:
            metrics.RECEIPT_MISSING.labels(self._contract.evidence.value).inc()
        self._emit(VisibleKind.FINAL, text=finish.final_text)
        self._emit(
            VisibleKind.DONE,
            terminal_state=finish.state.value,
            reason=finish.reason.value,
            run_id=self._run_id,
            trace_id=self._trace_id,
        )
