"""The values completion stages return, and what they judge (DESIGN.md section 6).

A stage is a pure function ``CandidateContext -> PolicyAction``.  The loop
persists what an action implies (a correction turn, a terminal event, a
request to run stop hooks) and only then acts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
    ToolStatus,
    canonical_json,
)
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy.delegation import DelegationContract
from nahida_workers.core.policy.verification import GatePolicy, Purpose
from nahida_workers.core.state import RunState

__all__ = [
    "Accept",
    "CandidateContext",
    "ContinueWithInbox",
    "Correct",
    "PolicyAction",
    "PolicyLimits",
    "RunStopHooks",
    "Settle",
    "Stage",
    "StartVerifier",
    "corrections_after",
    "corrections_by",
    "ok_receipts_in_order",
    "schema_digest",
]


@dataclass(frozen=True)
class Accept:
    """This stage has no objection."""


@dataclass(frozen=True)
class Correct:
    """Send the model a fixed correction and give it another turn.

    Attributes:
        stage: the stage that asked (corrections are counted per stage).
        text: the correction, committed as a ``user_input`` event.
        controls: more ``control`` payloads committed with it, before the
            correction (a goal's ``rejected -> active`` transition).
    """

    stage: str
    text: str
    controls: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Settle:
    """End the run in ``state`` for ``reason``."""

    state: TerminalState
    reason: ReasonCode


@dataclass(frozen=True)
class ContinueWithInbox:
    """Steering input is pending: claim it and continue instead of finishing."""


@dataclass(frozen=True)
class RunStopHooks:
    """Run the session's stop hooks on candidate ``candidate_seq``; record their verdict."""

    candidate_seq: int


@dataclass(frozen=True)
class StartVerifier:
    """Start a fresh verifier child on candidate ``candidate_seq``; park until its verdict.

    Attributes:
        purpose: the independent verification gate, or a goal.
        candidate_seq: the candidate answer's ``assistant_output`` sequence.
        revision: the run's mutation revision the verdict will hold for.
        triggers: why the gate asks (``files_changed:N``, ``high_risk:PATH``,
            ``writing_bash``); empty for a goal.
        controls: more ``control`` payloads committed with the start (the
            goal's transition to ``verifying``).
        goal: the goal's id, for a goal.
    """

    purpose: Purpose
    candidate_seq: int
    revision: int
    triggers: tuple[str, ...] = ()
    controls: tuple[Mapping[str, Any], ...] = ()
    goal: str | None = None


PolicyAction = Accept | Correct | Settle | ContinueWithInbox | RunStopHooks | StartVerifier


@dataclass(frozen=True)
class PolicyLimits:
    """Correction bounds of the pipeline (DESIGN.md section 6, each a named setting).

    Attributes:
        evidence_corrections: turns the evidence contract may ask for.
        intent_corrections: turns the incomplete-intent check may ask for.
        structured_corrections: turns the structured-output stage may ask for.
        verification_corrections: turns explicit verification may ask for.
        stop_hook_continuations: continuations stop hooks may force.
        delegation_corrections: turns the delegation contract may ask for.
        independent_corrections: verifier FAILs the independent
            verification gate feeds back before ``unverified``.
        goal_corrections: turns the goal stage may ask for (a goal never
            claimed, a verifier FAIL fed back) before it settles.
        truncation_recoveries: the loop's truncation bound; once the run
            has had more truncated turns, a committed structured output no
            longer passes (docs/concepts/context.md).
    """

    evidence_corrections: int = 1
    intent_corrections: int = 2
    structured_corrections: int = 2
    verification_corrections: int = 1
    stop_hook_continuations: int = 3
    delegation_corrections: int = 1
    independent_corrections: int = 1
    goal_corrections: int = 2
    truncation_recoveries: int = 3


@dataclass(frozen=True)
class CandidateContext:
    """What the stages judge.

    Attributes:
        state: the run so far (events and receipts).
        candidate: the ``assistant_output`` event without tool calls.
        contract: the session's completion contract.
        tool_choice: the session's tool choice.
        limits: correction bounds.
        pending_steering: unclaimed steering messages in the inbox.
        stop_hooks: the session has stop hooks configured.
        delegation: the job's delegation contract.
        gate: when the independent verification gate triggers.
        subagent: the session is itself a child session (the gate skips it).
        task_available: the session may start child sessions (the gate
            needs one for its verifier).
        goal: the job's ``goal:`` (active from the start), if any.
        tool_calling: the session's provider can call tools (False: no
            receipt can be made, ``no_tool_calling`` settles at once).
    """

    state: RunState
    candidate: Event
    contract: CompletionContract
    tool_choice: ToolChoice = ToolChoice.AUTO
    limits: PolicyLimits = field(default_factory=PolicyLimits)
    pending_steering: int = 0
    stop_hooks: bool = False
    delegation: DelegationContract = field(default_factory=DelegationContract)
    gate: GatePolicy = field(default_factory=GatePolicy)
    subagent: bool = False
    task_available: bool = False
    goal: str | None = None
    tool_calling: bool = True

    @property
    def text(self) -> str:
        """The candidate answer's text."""
        return str(self.candidate.payload.get("text", ""))


Stage = Callable[[CandidateContext], PolicyAction]


def corrections_by(state: RunState, stage: str) -> int:
    """How many corrections ``stage`` has already committed in this run."""
    return sum(
        1
        for e in state.events
        if e.type is EventType.CONTROL
        and e.payload.get("kind") == "correction"
        and e.payload.get("stage") == stage
    )


def corrections_after(state: RunState, stage: str, sequence: int) -> int:
    """How many corrections ``stage`` committed after ledger position ``sequence``."""
    return sum(
        1
        for e in state.events
        if e.sequence > sequence
        and e.type is EventType.CONTROL
        and e.payload.get("kind") == "correction"
        and e.payload.get("stage") == stage
    )


def ok_receipts_in_order(state: RunState) -> Iterator[tuple[int, ExecutionReceipt]]:
    """Successful receipts with the ledger sequence of their result, in ledger order."""
    found = [
        (state.result_seq.get(call_id, 0), receipt)
        for call_id, receipt in state.receipts.items()
        if receipt.status is ToolStatus.OK
    ]
    yield from sorted(found, key=lambda pair: pair[0])


def last_mutation_seq(state: RunState) -> int:
    """Ledger position of the latest successful workspace mutation (Write/Edit), or 0."""
    last = 0
    for seq, receipt in ok_receipts_in_order(state):
        if receipt.evidence_kind is EvidenceKind.MUTATE and receipt.tool_name in (
            "Write",
            "Edit",
        ):
            last = seq
    return last


def last_steering_seq(state: RunState) -> int:
    """Ledger position of the latest steering input, or 0.

    Runtime messages (a correction, a bound's prompt, the self-check of
    ``core/self_check.py``) are not steering: only a person's input is.
    """
    last = 0
    for e in state.events:
        if e.type is EventType.USER_INPUT and e.payload.get("source") in ("steering", "inbox"):
            last = e.sequence
    return last


def schema_digest(schema: object) -> str:
    """sha256 hex of a JSON Schema's canonical JSON (stored with the accepted object)."""
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()
