"""RunState folding and the completion policy (DESIGN.md section 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    EvidenceKind,
    EvidenceMode,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy import CandidateContext, Correct, Settle, evaluate_candidate
from nahida_workers.core.state import RunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "run-1"


def ev(seq: int, type_: EventType, call_id: str | None = None, /, **payload: Any) -> Event:
    if call_id is not None:
        payload.setdefault("call_id", call_id)
        payload.setdefault("name", "Deliver")
    return Event(run_id=RUN, sequence=seq, type=type_, payload=payload, call_id=call_id)


def receipt(
    call_id: str,
    kind: EvidenceKind,
    status: ToolStatus = ToolStatus.OK,
    **evidence: Any,
) -> ExecutionReceipt:
    return ExecutionReceipt(
        run_id=RUN,
        call_id=call_id,
        tool_name="Deliver",
        status=status,
        started_at=NOW,
        finished_at=NOW,
        input_fingerprint="0" * 64,
        evidence=evidence,
        evidence_kind=kind,
    )


# -- RunState ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sequence", [1, 2, 4, 7])
def test_applying_an_event_with_the_wrong_sequence_raises(sequence: int) -> None:
    state = RunState.from_ledger(RUN, [ev(1, EventType.USER_INPUT), ev(2, EventType.USER_INPUT)])
    with pytest.raises(ValueError, match="expected #3"):
        state.apply(ev(sequence, EventType.USER_INPUT))
    assert [e.sequence for e in state.events] == [1, 2]
    state.apply(ev(3, EventType.USER_INPUT))
    assert state.next_sequence == 4


def test_from_ledger_refuses_a_history_with_a_gap() -> None:
    with pytest.raises(ValueError):
        RunState.from_ledger(RUN, [ev(1, EventType.USER_INPUT), ev(3, EventType.USER_INPUT)])


def test_state_folds_calls_results_turns_and_terminal() -> None:
    state = RunState.from_ledger(
        RUN,
        [
            ev(1, EventType.USER_INPUT, text="go"),
            ev(2, EventType.ASSISTANT_OUTPUT, text="", call_ids=["a", "b"]),
            ev(3, EventType.TOOL_CALL, "a"),
            ev(4, EventType.TOOL_CALL, "b"),
            ev(5, EventType.TOOL_RESULT, "a", content="A"),
        ],
        [receipt("a", EvidenceKind.OBSERVE)],
    )
    assert state.turns == 1
    assert [c.call_id for c in state.pending_calls()] == ["b"]
    assert state.last_turn_call_ids() == ["a", "b"]
    assert set(state.receipts) == {"a"}
    assert state.terminal is None
    state.apply(ev(6, EventType.TERMINAL, state="completed"))
    assert state.terminal is not None and state.terminal.sequence == 6


# -- evaluate_candidate -------------------------------------------------------------------------


def judge(
    state: RunState,
    *,
    evidence: EvidenceMode = EvidenceMode.NONE,
    tool_choice: ToolChoice = ToolChoice.AUTO,
    **contract: Any,
) -> Correct | Settle:
    candidate = state.last_of(EventType.ASSISTANT_OUTPUT)
    assert candidate is not None
    action = evaluate_candidate(
        CandidateContext(
            state=state,
            candidate=candidate,
            contract=CompletionContract(evidence=evidence, **contract),
            tool_choice=tool_choice,
        )
    )
    assert isinstance(action, Correct | Settle)
    return action


def answered(*extra: Event, receipts: tuple[ExecutionReceipt, ...] = ()) -> RunState:
    """A run whose last turn is a no-tool answer (after ``extra`` events)."""
    events = [ev(1, EventType.USER_INPUT, text="go"), *extra]
    events.append(ev(len(events) + 1, EventType.ASSISTANT_OUTPUT, text="done", call_ids=[]))
    return RunState.from_ledger(RUN, events, receipts)


def with_call(kind: EvidenceKind, status: ToolStatus = ToolStatus.OK, **evidence: Any) -> RunState:
    return answered(
        ev(2, EventType.ASSISTANT_OUTPUT, text="", call_ids=["d1"]),
        ev(3, EventType.TOOL_CALL, "d1"),
        ev(4, EventType.TOOL_RESULT, "d1", content="ok"),
        receipts=(receipt("d1", kind, status, **evidence),),
    )


ACCEPTED = Settle(TerminalState.COMPLETED, ReasonCode.ANSWER_ACCEPTED)


def test_contract_none_accepts_a_plain_answer() -> None:
    assert judge(answered()) == ACCEPTED


def test_tool_choice_required_without_any_call_is_unverified() -> None:
    assert judge(answered(), tool_choice=ToolChoice.REQUIRED) == Settle(
        TerminalState.UNVERIFIED, ReasonCode.TOOL_REQUIRED_NOT_CALLED
    )
    state = with_call(EvidenceKind.OBSERVE)
    assert judge(state, tool_choice=ToolChoice.REQUIRED) == ACCEPTED


def test_a_deliver_receipt_without_external_id_does_not_count() -> None:
    without = judge(with_call(EvidenceKind.DELIVER), evidence=EvidenceMode.DELIVER)
    assert isinstance(without, Correct) and without.stage == "evidence"
    assert "deliver evidence" in without.text
    with_id = with_call(EvidenceKind.DELIVER, external_id="msg-42")
    assert judge(with_id, evidence=EvidenceMode.DELIVER) == ACCEPTED


def test_only_ok_receipts_of_the_right_kind_count() -> None:
    failed = with_call(EvidenceKind.OBSERVE, ToolStatus.ERROR)
    assert isinstance(judge(failed, evidence=EvidenceMode.OBSERVE), Correct)
    wrong_kind = with_call(EvidenceKind.OBSERVE)
    assert isinstance(judge(wrong_kind, evidence=EvidenceMode.MUTATE), Correct)
    assert judge(wrong_kind, evidence=EvidenceMode.OBSERVE) == ACCEPTED


def test_required_tools_must_have_succeeded() -> None:
    state = with_call(EvidenceKind.OBSERVE)
    assert judge(state, required_tools=("Deliver",)) == ACCEPTED
    missing = judge(state, required_tools=("Bash",))
    assert isinstance(missing, Correct) and "Bash" in missing.text


def test_after_one_evidence_correction_the_answer_is_unverified() -> None:
    corrected = answered(
        ev(2, EventType.ASSISTANT_OUTPUT, text="done", call_ids=[]),
        ev(3, EventType.CONTROL, kind="correction", stage="evidence"),
        ev(4, EventType.USER_INPUT, text="prove it", source="correction"),
    )
    assert judge(corrected, evidence=EvidenceMode.OBSERVE) == Settle(
        TerminalState.UNVERIFIED, ReasonCode.EVIDENCE_MISSING
    )
