"""The completion pipeline: is a no-tool answer a completion? (DESIGN.md section 6)

An answer with no tool call is a *candidate*.  Stages run in order; each is a
pure function of the run state returning an action value; the first stage
that does not accept decides.  The loop persists what the action implies
(a correction turn, a terminal event) and only then acts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nahida_workers.core.events import (
    CompletionContract,
    EventType,
    EvidenceKind,
    EvidenceMode,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.state import RunState

__all__ = [
    "Accept",
    "CandidateContext",
    "Correct",
    "PolicyAction",
    "Settle",
    "evaluate_candidate",
]


@dataclass(frozen=True)
class Accept:
    """This stage has no objection."""


@dataclass(frozen=True)
class Correct:
    """Send the model a fixed correction and give it another turn.

    Attributes:
        stage: the stage that asked (counted to bound corrections).
        text: the correction, committed as a ``user_input`` event.
    """

    stage: str
    text: str


@dataclass(frozen=True)
class Settle:
    """End the run in ``state`` for ``reason``."""

    state: TerminalState
    reason: ReasonCode


PolicyAction = Accept | Correct | Settle


@dataclass(frozen=True)
class CandidateContext:
    """What the stages judge: the run so far, its contract and its settings."""

    state: RunState
    contract: CompletionContract
    tool_choice: ToolChoice
    max_evidence_corrections: int = 1


Stage = Callable[[CandidateContext], PolicyAction]

_KIND_FOR_MODE = {
    EvidenceMode.OBSERVE: EvidenceKind.OBSERVE,
    EvidenceMode.MUTATE: EvidenceKind.MUTATE,
    EvidenceMode.DELIVER: EvidenceKind.DELIVER,
}


def corrections_by(state: RunState, stage: str) -> int:
    """How many corrections ``stage`` has already committed in this run."""
    return sum(
        1
        for e in state.events
        if e.type is EventType.CONTROL
        and e.payload.get("kind") == "correction"
        and e.payload.get("stage") == stage
    )


def _ok_receipt_kinds(state: RunState) -> set[EvidenceKind]:
    kinds: set[EvidenceKind] = set()
    for receipt in state.receipts.values():
        if receipt.status is not ToolStatus.OK:
            continue
        if receipt.evidence_kind is EvidenceKind.DELIVER and not receipt.evidence.get(
            "external_id"
        ):
            continue  # a delivery without its external id is not evidence
        kinds.add(receipt.evidence_kind)
    return kinds


def tool_required(ctx: CandidateContext) -> PolicyAction:
    """tool_choice=required and the run never called a tool → unverified (case B09)."""
    if ctx.tool_choice is ToolChoice.REQUIRED and not ctx.state.calls:
        return Settle(TerminalState.UNVERIFIED, ReasonCode.TOOL_REQUIRED_NOT_CALLED)
    return Accept()


def evidence_contract(ctx: CandidateContext) -> PolicyAction:
    """observe/mutate/deliver need a matching ok receipt; one correction, then unverified."""
    needed: set[EvidenceKind] = set(ctx.contract.required_receipt_kinds)
    if ctx.contract.evidence in _KIND_FOR_MODE:
        needed.add(_KIND_FOR_MODE[ctx.contract.evidence])
    have = _ok_receipt_kinds(ctx.state)
    missing_kinds = sorted(k.value for k in needed - have)
    ok_tools = {r.tool_name for r in ctx.state.receipts.values() if r.status is ToolStatus.OK}
    missing_tools = sorted(set(ctx.contract.required_tools) - ok_tools)
    if not missing_kinds and not missing_tools:
        return Accept()
    if corrections_by(ctx.state, "evidence") < ctx.max_evidence_corrections:
        parts = [f"{k} evidence" for k in missing_kinds] + [
            f"a successful {t} call" for t in missing_tools
        ]
        return Correct(
            "evidence",
            "Your answer is not backed by the ledger: missing "
            + ", ".join(parts)
            + ". Use the tools to do and check the work, then answer again.",
        )
    return Settle(TerminalState.UNVERIFIED, ReasonCode.EVIDENCE_MISSING)


#: The stages in DESIGN.md section 6 order (issue 5 fills in the rest).
DEFAULT_STAGES: tuple[Stage, ...] = (tool_required, evidence_contract)


def evaluate_candidate(
    ctx: CandidateContext, stages: Sequence[Stage] = DEFAULT_STAGES
) -> Correct | Settle:
    """Run the stages; the first non-accepting one decides, else completed."""
    for stage in stages:
        action = stage(ctx)
        if not isinstance(action, Accept):
            return action
    return Settle(TerminalState.COMPLETED, ReasonCode.ANSWER_ACCEPTED)
