"""The small policies of issue 23 items 4 and 7, one test per rule.

Self-check every N turns, the named tool choice, tool profiles by risk
class, the sourced execution summary, the text-bearing tool finish, the
structured-output bounds and the provider without tool calling -- each a
pure function returning a value the runtime persists.
"""

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
    FailureCode,
    ReasonCode,
    TerminalState,
    ToolStatus,
    VerificationStatus,
)
from nahida_workers.core.execution_summary import SUMMARY_HEADER, summarize_tool_messages
from nahida_workers.core.loop import CallProvider, LoopConfig, Persist, Signals, decide
from nahida_workers.core.messages import (
    AssistantMessage,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.core.non_answers import GiveUp, Repair, judge_non_answer
from nahida_workers.core.policy import CandidateContext, Correct, PolicyLimits, Settle
from nahida_workers.core.policy.stages import no_tool_calling, structured_output
from nahida_workers.core.self_check import SELF_CHECK_KIND, self_check_due
from nahida_workers.core.state import RunState
from nahida_workers.core.tool_choice import forced_tool
from nahida_workers.core.tool_profiles import (
    RiskClass,
    ToolProfile,
    outside_profile,
    risk_class,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class Run:
    """Builds one run's committed events in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.receipts: list[ExecutionReceipt] = []

    def add(self, kind: EventType, payload: dict[str, Any], call_id: str | None = None) -> Event:
        event = Event(
            run_id="r",
            sequence=len(self.events) + 1,
            type=kind,
            payload=payload,
            call_id=call_id,
            created_at=NOW,
        )
        self.events.append(event)
        return event

    def user(self, text: str = "go", source: str = "prompt") -> Run:
        self.add(EventType.USER_INPUT, {"text": text, "source": source})
        return self

    def turn(self, text: str = "", calls: tuple[str, ...] = (), **extra: Any) -> Event:
        n = sum(1 for e in self.events if e.type is EventType.ASSISTANT_OUTPUT)
        stop = "tool_calls" if calls else "end_turn"
        payload = {"text": text, "turn": n, "stop_reason": stop, "call_ids": list(calls)}
        return self.add(EventType.ASSISTANT_OUTPUT, {**payload, **extra})

    def call(
        self,
        call_id: str,
        name: str,
        kind: EvidenceKind = EvidenceKind.OBSERVE,
        evidence: dict[str, Any] | None = None,
    ) -> Run:
        self.turn(calls=(call_id,))
        self.add(EventType.TOOL_CALL, {"call_id": call_id, "name": name, "arguments": {}}, call_id)
        self.add(
            EventType.TOOL_RESULT,
            {"call_id": call_id, "name": name, "status": "ok", "content": "ok"},
            call_id,
        )
        self.receipts.append(
            ExecutionReceipt(
                run_id="r",
                call_id=call_id,
                tool_name=name,
                status=ToolStatus.OK,
                started_at=NOW,
                finished_at=NOW,
                input_fingerprint="x",
                evidence=evidence or {},
                evidence_kind=kind,
                verification_status=VerificationStatus.NOT_APPLICABLE,
            )
        )
        return self

    def control(self, **payload: Any) -> Run:
        self.add(EventType.CONTROL, payload)
        return self

    def state(self) -> RunState:
        return RunState.from_ledger("r", self.events, self.receipts)


def ctx(run: Run, contract: CompletionContract, **extra: Any) -> CandidateContext:
    state = run.state()
    candidate = state.last_of(EventType.ASSISTANT_OUTPUT)
    assert candidate is not None
    return CandidateContext(state=state, candidate=candidate, contract=contract, **extra)


def structured_ok(run: Run) -> Run:
    from nahida_workers.core.policy import schema_digest

    return run.call(
        "so",
        "StructuredOutput",
        EvidenceKind.NONE,
        {"valid": True, "schema_sha256": schema_digest(SCHEMA)},
    )


# -- item 7: self-check every 5 turns -----------------------------------------------------------


def test_a_self_check_is_due_before_every_fifth_turn_once() -> None:
    run = Run().user()
    for n in range(5):
        run.call(f"c{n}", "Read")
    check = self_check_due(run.state(), 5)
    assert check is not None and check.control == {"kind": SELF_CHECK_KIND, "turn": 5}
    decision = decide(run.state(), LoopConfig(), Signals(now=NOW))
    assert isinstance(decision, Persist)
    control, message = decision.events
    assert control.payload["kind"] == SELF_CHECK_KIND
    assert message.payload["source"] == "self_check"  # a runtime message, not steering
    for event in decision.events:
        run.add(event.type, dict(event.payload))
    assert self_check_due(run.state(), 5) is None  # committed: never repeated
    assert isinstance(decide(run.state(), LoopConfig(), Signals(now=NOW)), CallProvider)
    assert self_check_due(run.state(), 0) is None  # 0 turns it off
    assert self_check_due(Run().user().state(), 5) is None  # never before the first turn


def test_a_self_check_is_not_steering_for_the_structured_output_budget() -> None:
    run = Run().user()
    run.turn("{}")
    run.control(kind="correction", stage="structured_output").user("use the tool", "correction")
    run.control(kind=SELF_CHECK_KIND, turn=5).user("[runtime self-check]", "self_check")
    run.turn("{}")
    limits = PolicyLimits(structured_corrections=1)
    action = structured_output(ctx(run, CompletionContract(output_schema=SCHEMA), limits=limits))
    assert action == Settle(TerminalState.UNVERIFIED, ReasonCode.STRUCTURED_OUTPUT_MISSING)


# -- item 7: structured output and bounds -------------------------------------------------------


def test_a_valid_structured_output_does_not_pass_when_truncation_recoveries_ran_out() -> None:
    contract = CompletionContract(output_schema=SCHEMA)
    run = structured_ok(Run().user())
    run.turn("done")
    assert structured_output(ctx(run, contract)).__class__.__name__ == "Accept"
    cut = structured_ok(Run().user())
    cut.events[1] = cut.events[1].model_copy(
        update={"payload": {**cut.events[1].payload, "raw_stop_reason": "length"}}
    )
    cut.turn("done")
    limits = PolicyLimits(truncation_recoveries=0)
    action = structured_output(ctx(cut, contract, limits=limits))
    assert action == Settle(TerminalState.INCOMPLETE, ReasonCode.TRUNCATION_EXHAUSTED)
    # within the bound the same run passes
    assert structured_output(ctx(cut, contract)).__class__.__name__ == "Accept"


@pytest.mark.parametrize("reset", ["steering", "mutation"])
def test_the_structured_output_budget_resets_on_steering_or_a_mutation(reset: str) -> None:
    contract = CompletionContract(output_schema=SCHEMA)
    limits = PolicyLimits(structured_corrections=1)
    run = Run().user()
    run.turn("{}")
    run.control(kind="correction", stage="structured_output").user("use the tool", "correction")
    run.turn("{}")
    spent = structured_output(ctx(run, contract, limits=limits))
    assert spent == Settle(TerminalState.UNVERIFIED, ReasonCode.STRUCTURED_OUTPUT_MISSING)
    if reset == "steering":
        run.user("also count FIXMEs", "steering")
    else:
        run.call("w", "Write", EvidenceKind.MUTATE)
    run.turn("{}")
    assert isinstance(structured_output(ctx(run, contract, limits=limits)), Correct)


# -- item 4: a provider without tool calling ----------------------------------------------------


def test_no_tool_calling_settles_unverified_at_once_when_the_contract_needs_receipts() -> None:
    run = Run().user()
    run.turn("The file says hello.")
    for contract in (
        CompletionContract(evidence=EvidenceMode.OBSERVE),
        CompletionContract(output_schema=SCHEMA),
        CompletionContract(verify=("test",)),
        CompletionContract(required_tools=("Read",)),
    ):
        action = no_tool_calling(ctx(run, contract, tool_calling=False))
        assert action == Settle(TerminalState.UNVERIFIED, ReasonCode.NO_TOOL_CALLING)
    plain = no_tool_calling(ctx(run, CompletionContract(), tool_calling=False))
    assert plain.__class__.__name__ == "Accept"  # nothing to prove: a plain answer
    with_tools = no_tool_calling(ctx(run, CompletionContract(evidence=EvidenceMode.OBSERVE)))
    assert with_tools.__class__.__name__ == "Accept"  # the evidence stage corrects as usual
    met = Run().user().call("r", "Read")
    met.turn("read it")
    action = no_tool_calling(
        ctx(met, CompletionContract(evidence=EvidenceMode.OBSERVE), tool_calling=False)
    )
    assert action.__class__.__name__ == "Accept"  # receipts from an earlier provider count


def test_a_provider_without_tool_calling_gets_a_sourced_execution_summary() -> None:
    call = ToolCall(call_id="c1", name="Read", arguments={"path": "a.txt"})
    messages = (
        UserMessage(text="read a.txt"),
        AssistantMessage(text="Reading.", tool_calls=(call,)),
        ToolResultMessage(call_id="c1", name="Read", content="hello"),
        AssistantMessage(text="It says hello."),
    )
    out = summarize_tool_messages(messages)
    assert all(not isinstance(m, ToolResultMessage) for m in out)
    assert all(not getattr(m, "tool_calls", ()) for m in out)
    assert [m.role for m in out] == ["user", "assistant", "user", "assistant"]
    summary = out[2]
    assert isinstance(summary, UserMessage) and summary.text.startswith(SUMMARY_HEADER)
    assert '- Read {"path": "a.txt"} (ledger call c1): ok\nhello' in summary.text
    plain = (UserMessage(text="hi"), AssistantMessage(text="hello"))
    assert summarize_tool_messages(plain) == plain


# -- item 4: a tool finish that carries text but no parsed call ---------------------------------


def test_a_text_bearing_tool_finish_is_repaired_once_then_failed() -> None:
    run = Run().user()
    first = run.turn("I'm doing well!", stop_reason="end_turn")
    run.add(
        EventType.PROVIDER_ANOMALY,
        {"code": "finish_reason_mismatch", "detail": {"parsed_tool_calls": 0}, "turn": 0},
    )
    verdict = judge_non_answer(run.state(), first)
    assert isinstance(verdict, Repair) and verdict.control["anomaly"] == "text_tool_turn"
    run.control(**verdict.control).user(verdict.text, "repair")
    second = run.turn("Still text.", stop_reason="tool_calls")
    assert judge_non_answer(run.state(), second) == GiveUp(
        TerminalState.FAILED,
        ReasonCode.PROVIDER_PROTOCOL_INVALID,
        FailureCode.PROVIDER_PROTOCOL_INVALID,
    )
    plain = Run().user()
    assert judge_non_answer(plain.state(), plain.turn("An answer.")) is None


# -- item 4: a named tool_choice when the contract demands one tool -----------------------------


def test_the_structured_correction_names_the_structured_output_tool() -> None:
    run = Run().user()
    run.turn("{}")
    run.control(kind="correction", stage="structured_output").user("use it", "correction")
    contract = CompletionContract(output_schema=SCHEMA)
    offered = ("Read", "StructuredOutput")
    assert (
        forced_tool(run.state(), contract, offered=offered, tool_choice=ToolChoice.AUTO, named=True)
        == "StructuredOutput"
    )
    # a provider that cannot name a tool, or tool_choice none: the plain choice
    assert (
        forced_tool(
            run.state(), contract, offered=offered, tool_choice=ToolChoice.AUTO, named=False
        )
        is None
    )
    assert (
        forced_tool(run.state(), contract, offered=offered, tool_choice=ToolChoice.NONE, named=True)
        is None
    )
    # no correction pending: the model chooses
    fresh = Run().user()
    assert (
        forced_tool(
            fresh.state(), contract, offered=offered, tool_choice=ToolChoice.REQUIRED, named=True
        )
        is None
    )


def test_the_evidence_correction_names_the_one_required_tool_until_it_succeeded() -> None:
    contract = CompletionContract(required_tools=("Grep",))
    run = Run().user()
    run.turn("done")
    run.control(kind="correction", stage="evidence").user("use grep", "correction")
    offered = ("Read", "Grep")
    choose = dict(offered=offered, tool_choice=ToolChoice.AUTO, named=True)
    assert forced_tool(run.state(), contract, **choose) == "Grep"  # type: ignore[arg-type]
    two = CompletionContract(required_tools=("Grep", "Read"))
    assert forced_tool(run.state(), two, **choose) is None  # type: ignore[arg-type]


def test_the_loop_sends_the_named_tool() -> None:
    run = Run().user()
    run.turn("{}")
    run.control(kind="correction", stage="structured_output").user("use it", "correction")
    from nahida_workers.core.messages import ToolSchema

    tools = (ToolSchema(name="StructuredOutput", description="d", input_schema=SCHEMA),)
    config = LoopConfig(tools=tools, contract=CompletionContract(output_schema=SCHEMA))
    decision = decide(run.state(), config, Signals(now=NOW))
    assert isinstance(decision, CallProvider)
    assert decision.request.tool_name == "StructuredOutput"


# -- item 4: tool profiles by risk class --------------------------------------------------------


def test_risk_classes_and_profile_ceilings() -> None:
    assert risk_class(read_only=True, evidence_kind=EvidenceKind.OBSERVE) is RiskClass.READ_ONLY
    assert risk_class(read_only=False, evidence_kind=EvidenceKind.MUTATE) is RiskClass.WRITE
    assert risk_class(read_only=True, evidence_kind=EvidenceKind.DELIVER) is RiskClass.DELIVER
    tools = [("Read", RiskClass.READ_ONLY), ("Edit", RiskClass.WRITE), ("Send", RiskClass.DELIVER)]
    assert outside_profile(ToolProfile.REVIEWER, tools) == tools[1:]
    assert outside_profile(ToolProfile.EDITOR, tools) == tools[2:]
    assert outside_profile(ToolProfile.DELIVERER, tools) == []
