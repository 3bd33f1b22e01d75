"""The loop's terminal states, end to end in-process (scripted provider, memory ports).

Every case runs through :func:`nahida_workers.testing.run_inline` (or the same
wiring with a cancel set first) on a tmp_path workspace, and checks the one
rule every run obeys: exactly one terminal event, and it is the last one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.context import BASE_PROMPT
from nahida_workers.core.events import (
    Event,
    EventType,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.loop import (
    CallProvider,
    CallResult,
    Done,
    Finish,
    LoopConfig,
    RunBatch,
    Signals,
    decide,
    final_text_for,
    result_events,
    terminal_event,
    turn_events,
)
from nahida_workers.core.messages import (
    Anomaly,
    ProviderRequest,
    ProviderTurn,
    ToolCall,
    ToolResultMessage,
)
from nahida_workers.core.state import RunState
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ports import Provider
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.testing import (
    FakeClock,
    InlineResult,
    ListTaskQueue,
    memory_runner,
    run_inline,
    scripted_spec,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class RecordingProvider:
    """The scripted provider, recording every request it was asked to answer."""

    def __init__(self, spec: SessionSpec, requests: list[ProviderRequest]) -> None:
        self._inner = ScriptedProvider(load_script(spec.provider["script"]))
        self.name, self.model = self._inner.name, self._inner.model
        self._requests = requests

    def complete(self, request: ProviderRequest, **kw: Any) -> ProviderTurn:
        self._requests.append(request)
        return self._inner.complete(request, **kw)


@dataclass
class Ran:
    """What one in-process run left in the ledger, plus the provider requests."""

    result: InlineResult
    requests: list[ProviderRequest] = field(default_factory=list)

    @property
    def events(self) -> list[Event]:
        return self.result.events

    def of(self, kind: EventType) -> list[Event]:
        return [e for e in self.events if e.type is kind]


def run_script(
    workspace: Path, turns: list[dict[str, Any]], *, cancel: bool = False, **overrides: Any
) -> Ran:
    """Run ``turns`` to a terminal state; with ``cancel`` the flag is set before the run."""
    requests: list[ProviderRequest] = []
    clock = FakeClock(NOW)
    ledger = MemoryLedger()

    def provider_for(spec: SessionSpec) -> Provider:
        return RecordingProvider(spec, requests)

    runner = memory_runner(ledger=ledger, clock=clock, provider_for=provider_for)
    spec = scripted_spec(turns, **overrides)
    if not cancel:
        return Ran(run_inline(spec, workspace, runner=runner), requests)
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(workspace))
    with ledger.transaction() as tx:
        ledger.request_cancel(tx, session.session_id, at=clock.now())
    outcome = runner.run(session.session_id)
    run = ledger.runs_of(session.session_id)[-1]
    result = InlineResult(
        outcome=outcome,
        session=ledger.get_session(session.session_id) or session,
        run=ledger.get_run(run.run_id) or run,
        events=ledger.events(run.run_id),
        receipts=ledger.receipts(run.run_id),
    )
    return Ran(result, requests)


def ls_turn(call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "LS", "arguments": {"path": "."}}]}


@dataclass(frozen=True)
class Case:
    turns: list[dict[str, Any]]
    state: TerminalState
    reason: ReasonCode
    failure: FailureCode | None
    provider_calls: int
    overrides: dict[str, Any] = field(default_factory=dict)
    cancel: bool = False
    answer: str = ""


CASES = {
    "no_tool_answer": Case(
        [{"text": "All done."}],
        TerminalState.COMPLETED,
        ReasonCode.ANSWER_ACCEPTED,
        None,
        1,
        answer="All done.",
    ),
    "max_steps": Case(
        [ls_turn(f"c{i}") for i in range(6)],
        TerminalState.INCOMPLETE,
        ReasonCode.MAX_STEPS,
        None,
        2,
        overrides={"tools": ["LS"], "limits": {"max_steps": 2}},
    ),
    "provider_error_500": Case(
        [{"error": {"status": 500, "message": "upstream exploded sk-abc"}}],
        TerminalState.FAILED,
        ReasonCode.PROVIDER_ERROR,
        FailureCode.PROVIDER_ERROR,
        1,
    ),
    "script_exhausted": Case(
        [ls_turn("c0")],
        TerminalState.FAILED,
        ReasonCode.PROVIDER_ERROR,
        FailureCode.SCRIPT_EXHAUSTED,
        2,
        overrides={"tools": ["LS"]},
    ),
    "cancelled_before_the_run": Case(
        [{"text": "never asked"}],
        TerminalState.CANCELLED,
        ReasonCode.CANCELLED,
        None,
        0,
        cancel=True,
    ),
    "evidence_observe_without_a_tool": Case(
        [{"text": "I looked, trust me."}, {"text": "Still trust me."}],
        TerminalState.UNVERIFIED,
        ReasonCode.EVIDENCE_MISSING,
        None,
        2,
        overrides={"contract": {"evidence": "observe"}},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_terminal_states(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    ran = run_script(tmp_path, case.turns, cancel=case.cancel, **case.overrides)
    result = ran.result
    assert result.outcome is SessionOutcome.FINISHED
    terminals = ran.of(EventType.TERMINAL)
    assert len(terminals) == 1, "exactly one terminal event"
    assert result.events[-1] == terminals[0], "the terminal event is the last one"
    assert [e.sequence for e in result.events] == list(range(1, len(result.events) + 1))
    payload = result.terminal
    assert (payload["state"], payload["reason"], payload["failure_code"]) == (
        case.state.value,
        case.reason.value,
        case.failure.value if case.failure else None,
    )
    expected_text = final_text_for(case.state, case.reason, case.answer)
    assert payload["final_text"] == expected_text
    assert (result.run.terminal_state, result.run.terminal_reason, result.run.failure_code) == (
        case.state,
        case.reason,
        case.failure,
    )
    assert result.session.status is SessionStatus.DONE
    assert len(ran.requests) == case.provider_calls
    assert "upstream exploded" not in json.dumps([e.payload.as_json() for e in result.events])


def test_evidence_contract_sends_exactly_one_correction(tmp_path: Path) -> None:
    case = CASES["evidence_observe_without_a_tool"]
    ran = run_script(tmp_path, case.turns, **case.overrides)
    assert [e.type for e in ran.events] == [
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.CONTROL,
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TERMINAL,
    ]
    control, correction = ran.events[2], ran.events[3]
    assert control.payload == {"kind": "correction", "stage": "evidence"}
    assert correction.payload["source"] == "correction"
    assert "observe evidence" in correction.payload["text"]
    # the model saw the correction in its second request
    assert ran.requests[1].messages[-1].text == correction.payload["text"]  # type: ignore[union-attr]


def test_a_turn_reusing_call_ids_gets_renamed_ids_and_an_anomaly(tmp_path: Path) -> None:
    turns = [ls_turn("call_0"), ls_turn("call_0"), {"text": "done"}]
    ran = run_script(tmp_path, turns, tools=["LS"])
    assert ran.result.terminal["state"] == "completed"
    calls = ran.of(EventType.TOOL_CALL)
    assert [e.call_id for e in calls] == ["call_0", "call_0#2"]
    assert [e.payload["call_id"] for e in calls] == ["call_0", "call_0#2"]
    anomalies = ran.of(EventType.PROVIDER_ANOMALY)
    assert [a.payload["code"] for a in anomalies] == ["call_id_reused"]
    assert anomalies[0].payload["detail"] == {"renamed": [["call_0", "call_0#2"]]}
    assert anomalies[0].payload["turn"] == 1
    results = ran.of(EventType.TOOL_RESULT)
    assert [e.call_id for e in results] == ["call_0", "call_0#2"]
    assert [r.call_id for r in ran.result.receipts] == ["call_0", "call_0#2"]
    seen = [m.call_id for m in ran.requests[2].messages if isinstance(m, ToolResultMessage)]
    assert seen == ["call_0", "call_0#2"]


@pytest.mark.parametrize("raw", ["{not json", '{"command": "touch executed.marker"'])
def test_a_call_with_invalid_json_arguments_is_committed_never_run_and_answered(
    tmp_path: Path, raw: str
) -> None:
    turns = [
        {"tool_calls": [{"id": "c1", "name": "Bash", "raw_arguments": raw}]},
        {"text": "My JSON was invalid, so the command did not run."},
    ]
    ran = run_script(tmp_path, turns, tools=["Bash"])
    assert ran.result.terminal["state"] == "completed"
    (call,) = ran.of(EventType.TOOL_CALL)
    assert call.payload["arguments_error"]
    assert call.payload["raw_arguments"] == raw
    assert call.payload["arguments"] == {}
    (result,) = ran.of(EventType.TOOL_RESULT)
    assert result.payload["is_error"] is True
    assert result.payload["status"] == ToolStatus.ERROR.value
    (receipt,) = ran.result.receipts
    assert receipt.evidence == {"error_code": "invalid_arguments"}
    assert receipt.started_at == receipt.finished_at
    assert not (tmp_path / "executed.marker").exists(), "the call must never run"
    seen = [m for m in ran.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert len(seen) == 1 and seen[0].call_id == "c1" and seen[0].is_error
    assert "not run" in seen[0].content and "JSON" in seen[0].content


# -- the pure functions directly -------------------------------------------------------------


def _state(*events: Event) -> RunState:
    return RunState.from_ledger("run-1", events)


def _prompt() -> Event:
    return Event(run_id="run-1", sequence=1, type=EventType.USER_INPUT, payload={"text": "go"})


def test_decide_asks_the_provider_with_the_projected_transcript() -> None:
    state = _state(_prompt())
    decision = decide(state, LoopConfig(system_prompt="sys"), Signals(now=NOW))
    assert isinstance(decision, CallProvider)
    assert decision.request.turn_index == 0
    # The runtime's base prompt first; the job's system prompt is appended, never in its place.
    system = decision.request.system or ""
    assert system.startswith(BASE_PROMPT) and system.endswith("# Job instructions\n\nsys")
    assert [m.role for m in decision.request.messages] == ["user"]


def test_turn_events_then_decide_runs_the_first_batch_then_results_close_it() -> None:
    state = _state(_prompt())
    turn = ProviderTurn(
        text="working",
        tool_calls=(
            ToolCall(call_id="a", name="Read"),
            ToolCall(call_id="b", name="Read"),
            ToolCall(call_id="w", name="Write"),
        ),
        anomalies=(Anomaly(code="finish_reason_mismatch"),),
    )
    events = turn_events(state, turn, now=NOW)
    assert [(e.sequence, e.type, e.call_id) for e in events] == [
        (2, EventType.ASSISTANT_OUTPUT, None),
        (3, EventType.TOOL_CALL, "a"),
        (4, EventType.TOOL_CALL, "b"),
        (5, EventType.TOOL_CALL, "w"),
        (6, EventType.PROVIDER_ANOMALY, None),
    ]
    assert events[0].payload["call_ids"] == ["a", "b", "w"]
    for e in events:
        state.apply(e)
    config = LoopConfig(may_fan_out=lambda name: name == "Read")
    decision = decide(state, config, Signals(now=NOW))
    assert isinstance(decision, RunBatch)
    assert decision.batch.call_ids == ("a", "b") and decision.batch.parallel
    # results are committed in the order given (provider order), whatever finished first
    done = [
        CallResult("a", "Read", ToolStatus.OK, "A"),
        CallResult("b", "Read", ToolStatus.ERROR, "B failed"),
    ]
    results = result_events(state, done, now=NOW)
    assert [(e.sequence, e.call_id, e.payload["is_error"]) for e in results] == [
        (7, "a", False),
        (8, "b", True),
    ]
    for e in results:
        state.apply(e)
    decision = decide(state, config, Signals(now=NOW))
    assert isinstance(decision, RunBatch)
    assert decision.batch.call_ids == ("w",) and not decision.batch.parallel


def test_cancel_wins_over_pending_calls_and_a_terminal_run_is_done() -> None:
    state = _state(_prompt())
    for e in turn_events(
        state, ProviderTurn(tool_calls=(ToolCall(call_id="a", name="Read"),)), now=NOW
    ):
        state.apply(e)
    decision = decide(state, LoopConfig(), Signals(now=NOW, cancel_requested=True))
    assert isinstance(decision, Finish)
    assert (decision.state, decision.reason) == (TerminalState.CANCELLED, ReasonCode.CANCELLED)
    state.apply(terminal_event(state, decision, now=NOW))
    assert isinstance(decide(state, LoopConfig(), Signals(now=NOW)), Done)


def test_the_wall_clock_budget_ends_the_run_incomplete() -> None:
    state = _state(_prompt())
    decision = decide(state, LoopConfig(wall_clock_budget_s=60), Signals(now=NOW, elapsed_s=60))
    assert isinstance(decision, Finish)
    assert (decision.state, decision.reason) == (
        TerminalState.INCOMPLETE,
        ReasonCode.BUDGET_EXHAUSTED,
    )
