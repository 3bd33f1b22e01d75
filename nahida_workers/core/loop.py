"""The agent loop as a pure state machine (DESIGN.md sections 3 and 9).

:func:`decide` looks at the committed run state and the outside signals and
returns one decision value.  The runtime performs it, commits the events the
``*_events`` builders return, applies them to the state, and asks again.
Nothing here does I/O, reads a clock or draws a random number: ``now`` and
every id come in as arguments, so the loop is tested fast and in-process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from typing import Any

from nahida_workers.core.admission import admit_call
from nahida_workers.core.bounds import (
    BoundLimits,
    BoundPrompt,
    BoundStop,
    calls_within_bound,
    check_bounds,
    refusal_events,
)
from nahida_workers.core.children import (
    AdoptChildren,
    ChildView,
    Park,
    decide_children,
    leading_task_calls,
)
from nahida_workers.core.compaction import Compactor, estimate_tokens
from nahida_workers.core.context import CONTEXT_KIND, instructions_of, system_prompt
from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    FailureCode,
    ReasonCode,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.memory import MemoryItem, Selection, context_for, with_memory
from nahida_workers.core.messages import (
    Anomaly,
    Message,
    ProviderRequest,
    ProviderTurn,
    StopReason,
    ToolCall,
    ToolChoice,
    ToolSchema,
)
from nahida_workers.core.non_answers import OWN_FINAL_TEXT, GiveUp, Repair, judge_non_answer
from nahida_workers.core.ordering import Batch, plan_batches
from nahida_workers.core.payloads import call_payload, result_payload
from nahida_workers.core.policy import (
    CandidateContext,
    ContinueWithInbox,
    Correct,
    PolicyLimits,
    RunStopHooks,
    Settle,
    StartVerifier,
    evaluate_candidate,
)
from nahida_workers.core.policy.delegation import DelegationContract
from nahida_workers.core.policy.verification import GatePolicy, VerifierView, workspace_base
from nahida_workers.core.self_check import self_check_due
from nahida_workers.core.state import RunState
from nahida_workers.core.team_gate import TeamNudge, TeamView, TeamWait, team_gate
from nahida_workers.core.tool_choice import forced_tool
from nahida_workers.core.transcript import Projection
from nahida_workers.core.verifier_steps import (
    AdoptVerdict,
    RecordBase,
    StartVerification,
    needs_base,
    verifier_step,
)

__all__ = [
    "AdoptChildren",
    "AdoptVerdict",
    "CallProvider",
    "CallResult",
    "ClaimInbox",
    "Decision",
    "Done",
    "Finish",
    "LoopConfig",
    "Park",
    "Persist",
    "ReadInstructions",
    "RecordBase",
    "RunBatch",
    "RunHooks",
    "Signals",
    "StartVerification",
    "TeamWait",
    "decide",
    "final_text_for",
    "result_events",
    "terminal_event",
    "turn_events",
]


@dataclass(frozen=True)
class LoopConfig:
    """What the loop needs to know about the session (from its config snapshot).

    Attributes:
        system_prompt: sent with every provider call.
        tools: schemas offered to the model (empty: no tool calling).
        tool_choice: auto / required / none.
        may_fan_out: tool name -> read-only and concurrency-safe.
        contract: the completion contract.
        max_steps: provider turns before the run ends ``incomplete``.
        wall_clock_budget_s: seconds of run time before ``incomplete``.
        max_output_tokens: cap per provider reply, in tokens.
        context_budget_tokens: compact the transcript to this many tokens.
        policy: correction bounds of the completion pipeline.
        bounds: loop bounds (repeats, failures, truncation, token budget).
        stop_hooks: the session has stop hooks (the runtime runs them).
        delegation: the job's delegation contract (``core/policy/delegation.py``).
        gate: when the independent verification gate triggers.
        subagent: the session is a child session (the gate skips it).
        task_available: the session may start child sessions.
        goal: the job's ``goal:`` (``core/policy/goals.py``).
        may_write: tool name -> it may change the workspace (the base commit
            is recorded before the first such call, ``core/verifier_steps.py``).
        records_base: the session may need a verifier's diff: record the base.
        base_at_start: record it before the first provider call (a session
            with a goal: its children, not only itself, may do the work).
        instruction_files: the workspace's instruction files each run reads
            before its first provider call (empty: the job does not trust
            the workspace; ``core/context.py``).
        tool_calling: the provider can call tools (``supports_tools``); when
            False a contract that needs receipts ends ``unverified`` at once.
        named_tool_choice: the provider accepts a named ``tool_choice`` (the
            loop names one when the contract demands it, ``core/tool_choice.py``).
        self_check_every: a self-check prompt before every N-th provider turn
            (``core/self_check.py``; 0: never).
        memory: the workspace's memory items (``core/memory.py``); the live
            ones a read did not supersede follow the system prompt.
        memory_limit: most memory items in one request.
        workspace: the session's workspace root (paths read are made relative).
    """

    system_prompt: str | None = None
    tools: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice = ToolChoice.AUTO
    may_fan_out: Callable[[str], bool] = field(default=lambda _name: False)
    contract: CompletionContract = field(default_factory=CompletionContract)
    max_steps: int = 50
    wall_clock_budget_s: float = 3600.0
    max_output_tokens: int | None = None
    context_budget_tokens: int | None = None
    policy: PolicyLimits = field(default_factory=PolicyLimits)
    bounds: BoundLimits = field(default_factory=BoundLimits)
    stop_hooks: bool = False
    delegation: DelegationContract = field(default_factory=DelegationContract)
    gate: GatePolicy = field(default_factory=GatePolicy)
    subagent: bool = False
    task_available: bool = False
    goal: str | None = None
    may_write: Callable[[str], bool] = field(default=lambda _name: False)
    records_base: bool = False
    base_at_start: bool = False
    instruction_files: tuple[str, ...] = ()
    tool_calling: bool = True
    named_tool_choice: bool = True
    self_check_every: int = 5
    memory: tuple[MemoryItem, ...] = ()
    memory_limit: int = 20
    workspace: str | None = None


@dataclass(frozen=True)
class Signals:
    """Observations of the outside world at a loop boundary.

    Attributes:
        now: current UTC time (stamped on events).
        cancel_requested: the session's cancel flag is set.
        elapsed_s: seconds this run has been executing.
        pending_steering: unclaimed steering messages in the session inbox.
        children: call id -> what became of that Task call's child session
            (``core/children.py``); read only when Task calls are pending.
        unfinished_children: ids of this session's children that have not
            ended (background ones); a ``completed`` verdict becomes
            ``incomplete/children_unfinished`` while any is left, unless the
            contract allows it.
        verifier: what became of the pending verifier child
            (``core/verifier_steps.py``); read only when one is pending.
        team: the session's team as committed (``core/team_gate.py``); read
            only at a candidate answer, None when it is in no team.
    """

    now: datetime
    cancel_requested: bool = False
    elapsed_s: float = 0.0
    pending_steering: int = 0
    children: Mapping[str, ChildView] = field(default_factory=dict)
    unfinished_children: tuple[str, ...] = ()
    verifier: VerifierView | None = None
    team: TeamView | None = None


@dataclass(frozen=True)
class CallProvider:
    """Call the provider with this request, then commit :func:`turn_events`.

    ``memory``: the workspace memory in the request (the runtime notes which
    items were injected and which a read superseded).
    """

    request: ProviderRequest
    memory: Selection | None = None


@dataclass(frozen=True)
class RunBatch:
    """Execute this batch, then commit :func:`result_events` with the receipts."""

    batch: Batch


@dataclass(frozen=True)
class Persist:
    """Commit these events (e.g. a correction turn), then decide again."""

    events: tuple[Event, ...]


@dataclass(frozen=True)
class Finish:
    """Commit the terminal event and the run row, release the session."""

    state: TerminalState
    reason: ReasonCode
    final_text: str
    failure_code: FailureCode | None = None


@dataclass(frozen=True)
class RunHooks:
    """Run the session's stop hooks on the candidate answer; commit their verdict.

    ``candidate_seq`` is the candidate's ``assistant_output`` sequence, ``answer``
    its text (what the hooks judge).
    """

    candidate_seq: int
    answer: str


@dataclass(frozen=True)
class ClaimInbox:
    """Claim the pending steering messages and commit them as user input."""


@dataclass(frozen=True)
class Done:
    """The run is already terminal; nothing to do."""


@dataclass(frozen=True)
class ReadInstructions:
    """Read these instruction files from the workspace and commit the ``context`` control.

    ``paths`` are relative to the workspace, in the job's order; the runtime
    confines them to it, bounds them (``core/context.py``
    :func:`~nahida_workers.core.context.bound_instructions`) and commits
    :func:`~nahida_workers.core.context.context_control` before the run's
    first provider call.
    """

    paths: tuple[str, ...]


Decision = (
    CallProvider
    | RunBatch
    | Persist
    | Finish
    | RunHooks
    | ClaimInbox
    | Done
    | ReadInstructions
    | Park
    | AdoptChildren
    | RecordBase
    | StartVerification
    | AdoptVerdict
    | TeamWait
)


@dataclass(frozen=True)
class CallResult:
    """What the executor produced for one call, before it is committed."""

    call_id: str
    name: str
    status: ToolStatus
    content: str
    evidence_kind: str = "none"


def _event(
    state: RunState,
    offset: int,
    kind: EventType,
    payload: dict[str, Any],
    now: datetime,
    call_id: str | None = None,
) -> Event:
    return Event(
        run_id=state.run_id,
        sequence=state.next_sequence + offset,
        type=kind,
        payload=payload,
        call_id=call_id,
        created_at=now,
    )


def final_text_for(state: TerminalState, reason: ReasonCode, answer: str = "") -> str:
    """The final text a user sees; for anything but completed the runtime writes it.

    The model's own words are shown only for ``completed`` (DESIGN.md section 6).
    """
    if state is TerminalState.COMPLETED:
        return answer
    if reason in OWN_FINAL_TEXT:
        return OWN_FINAL_TEXT[reason]
    plain = {
        TerminalState.UNVERIFIED: "The work is not verified",
        TerminalState.INCOMPLETE: "The work is not finished",
        TerminalState.FAILED: "The run failed",
        TerminalState.CANCELLED: "The run was cancelled",
    }[state]
    return f"{plain} ({reason.value.replace('_', ' ')})."


def decide(state: RunState, config: LoopConfig, signals: Signals) -> Decision:
    """The next step of the loop, from committed state only."""
    if state.terminal is not None:
        return Done()
    if signals.cancel_requested:
        return _finish(TerminalState.CANCELLED, ReasonCode.CANCELLED)
    pending = state.pending_calls()
    if pending:
        head = leading_task_calls(pending)
        if head:  # child sessions (DESIGN.md section 8): adopt in call order, or park
            return decide_children(head, signals.children)
        pending = _before_first_task(pending)
        allowed = calls_within_bound(state, pending, config.bounds)
        if allowed == 0:
            return Persist(refusal_events(state, pending, now=signals.now))
        batch = plan_batches(pending[:allowed], config.may_fan_out)[0]
        if config.records_base and needs_base(state, batch.calls, config.may_write):
            return RecordBase()
        return RunBatch(batch)
    verifying = verifier_step(state, signals.verifier)  # a verifier child (section 6)
    if verifying is not None:
        return verifying
    last = state.last_of(EventType.ASSISTANT_OUTPUT, EventType.TOOL_RESULT, EventType.USER_INPUT)
    if (
        last is not None
        and last.type is EventType.ASSISTANT_OUTPUT
        and not last.payload.get("call_ids")
        and last.payload.get("stop_reason") != StopReason.PAUSE_TURN.value
    ):
        # A paused turn (pause_turn) is not judged: the next call continues it.
        return _answered(state, config, signals, last)
    return _next_turn(state, config, signals)


def _before_first_task(pending: Sequence[ToolCall]) -> list[ToolCall]:
    """The pending calls before the first Task call: results stay in call order."""
    out: list[ToolCall] = []
    for call in pending:
        if leading_task_calls([call]):
            break
        out.append(call)
    return out


def _answered(state: RunState, config: LoopConfig, signals: Signals, last: Event) -> Decision:
    """The model answered with no tool call: truncated, a non-answer, or a candidate."""
    if last.payload.get("stop_reason") == StopReason.MAX_TOKENS.value:
        return _truncated(state, config, signals)
    verdict = judge_non_answer(state, last, pending_steering=signals.pending_steering)
    if isinstance(verdict, GiveUp):
        return _finish(verdict.state, verdict.reason, code=verdict.failure_code)
    if isinstance(verdict, Repair):
        if state.turns >= config.max_steps:
            return _finish(TerminalState.INCOMPLETE, ReasonCode.MAX_STEPS)
        source = "correction" if verdict.control.get("kind") == "correction" else "repair"
        return _prompt(state, signals, verdict.control, verdict.text, source)
    return _judge_candidate(state, config, signals, last)


def _next_turn(state: RunState, config: LoopConfig, signals: Signals) -> Decision:
    """Every call is answered: stop on a budget or bound, take steering, or call the model."""
    if state.turns >= config.max_steps:
        return _finish(TerminalState.INCOMPLETE, ReasonCode.MAX_STEPS)
    if signals.elapsed_s >= config.wall_clock_budget_s:
        return _finish(TerminalState.INCOMPLETE, ReasonCode.BUDGET_EXHAUSTED)
    bound = check_bounds(state, config.bounds)
    if isinstance(bound, BoundStop):
        return _finish(bound.state, bound.reason)
    if isinstance(bound, BoundPrompt):
        return _prompt(
            state,
            signals,
            {"kind": "bound", "bound": bound.bound, "key": bound.key},
            bound.text,
            "bound",
        )
    if signals.pending_steering > 0:  # a provider boundary with every call answered
        return ClaimInbox()
    if config.records_base and config.base_at_start and not workspace_base(state)[0]:
        return RecordBase()
    if config.instruction_files and not state.controls_of(CONTEXT_KIND):
        return ReadInstructions(config.instruction_files)
    check = self_check_due(state, config.self_check_every)
    if check is not None:
        return _prompt(state, signals, check.control, check.text, "self_check")
    tools = config.tools if config.tool_choice is not ToolChoice.NONE else ()
    memory = context_for(
        config.memory,
        chain(state.history, state.events),  # lazy: read only when there is memory
        now=signals.now,
        workspace=config.workspace,
        limit=config.memory_limit,
    )
    return CallProvider(
        ProviderRequest(
            run_id=state.run_id,
            turn_index=state.turns,
            run_index=state.run_index,
            system=with_memory(_system(state, config), memory),
            messages=tuple(_transcript(state, config)),
            tools=tools,
            tool_choice=config.tool_choice,
            tool_name=forced_tool(
                state,
                config.contract,
                offered=tuple(t.name for t in tools),
                tool_choice=config.tool_choice,
                named=config.named_tool_choice,
            ),
            max_output_tokens=config.max_output_tokens,
        ),
        memory,
    )


def _system(state: RunState, config: LoopConfig) -> str:
    """The run's system text: base prompt, instruction files, the job's (core/context.py)."""
    controls = state.controls_of(CONTEXT_KIND) if config.instruction_files else []
    return system_prompt(
        config.contract,
        instructions=instructions_of(controls[-1].payload if controls else None),
        job_prompt=config.system_prompt,
    )


def _prompt(
    state: RunState,
    signals: Signals,
    control: dict[str, Any],
    text: str,
    source: str,
    *,
    before: Sequence[Mapping[str, Any]] = (),
) -> Persist:
    """A control event and the user input it injects, committed together.

    ``before``: more control payloads committed first (a goal's transition).
    """
    n = len(before)
    return Persist(
        (
            *(
                _event(state, i, EventType.CONTROL, dict(c), signals.now)
                for i, c in enumerate(before)
            ),
            _event(state, n, EventType.CONTROL, control, signals.now),
            _event(
                state,
                n + 1,
                EventType.USER_INPUT,
                {"text": text, "source": source, "message_id": None},
                signals.now,
            ),
        )
    )


def _truncated(state: RunState, config: LoopConfig, signals: Signals) -> Decision:
    """A reply cut off by the output token limit: recover up to N times, then incomplete."""
    done = state.tallies.truncations
    if done >= config.bounds.truncation_recoveries or state.turns >= config.max_steps:
        return _finish(TerminalState.INCOMPLETE, ReasonCode.TRUNCATION_EXHAUSTED)
    return _prompt(
        state,
        signals,
        {"kind": "truncation", "attempt": done + 1},
        "Your reply was cut off at the output token limit. Continue exactly where it "
        "stopped; do not repeat what you already wrote. Be more concise.",
        "bound",
    )


def _transcript(state: RunState, config: LoopConfig) -> list[Message]:
    """The request's messages, projected and compacted from what is new (linear cost)."""
    # A session is a conversation (DESIGN.md section 8): earlier runs come first.
    projection = state.projection
    if projection is None:
        projection = state.projection = Projection(memo=state.memo)
    projection.follow(state.history, state.events)
    settled, tail = projection.parts()
    if config.context_budget_tokens is None:
        return [*settled, *tail]
    if state.compaction is None:
        known = state.token_estimates

        def estimate(message: Message) -> int:
            hit = known.get(id(message))
            if hit is None or hit[0] is not message:
                hit = known[id(message)] = (message, estimate_tokens(message))
            return int(hit[1])

        state.compaction = Compactor(estimate)
    return state.compaction(settled, tail, config.context_budget_tokens)


def _finish(
    state: TerminalState, reason: ReasonCode, answer: str = "", code: FailureCode | None = None
) -> Finish:
    return Finish(state, reason, final_text_for(state, reason, answer), code)


def _judge_candidate(
    state: RunState, config: LoopConfig, signals: Signals, candidate: Event
) -> Decision:
    action = evaluate_candidate(
        CandidateContext(
            state=state,
            candidate=candidate,
            contract=config.contract,
            tool_choice=config.tool_choice,
            limits=config.policy,
            pending_steering=signals.pending_steering,
            stop_hooks=config.stop_hooks,
            delegation=config.delegation,
            gate=config.gate,
            subagent=config.subagent,
            task_available=config.task_available,
            goal=config.goal,
            tool_calling=config.tool_calling,
        )
    )
    answer = str(candidate.payload.get("text", ""))
    match action:
        case Settle():
            return _settle(action, state, config, signals, answer)
        case ContinueWithInbox():
            return ClaimInbox()
        case RunStopHooks():
            return RunHooks(action.candidate_seq, answer)
        case StartVerifier():
            return StartVerification(
                action.purpose,
                action.candidate_seq,
                action.revision,
                action.triggers,
                action.controls,
                action.goal,
            )
        case Correct():
            if state.turns >= config.max_steps:
                return _finish(TerminalState.INCOMPLETE, ReasonCode.MAX_STEPS)
            return _prompt(
                state,
                signals,
                {"kind": "correction", "stage": action.stage},
                action.text,
                "correction",
                before=action.controls,
            )
        case _:  # Accept never leaves evaluate_candidate
            raise AssertionError(f"unexpected policy action {action!r}")


def _settle(
    action: Settle, state: RunState, config: LoopConfig, signals: Signals, answer: str
) -> Decision:
    """The policy's verdict -- unless the session's team is not done with it.

    DESIGN.md section 8: a team session whose answer would complete it first
    passes the team gate (``core/team_gate.py``): it is told about work it
    holds or can claim, or it parks on the team (an idle member until work
    or mail arrives, the lead until the graph is settled and its members
    ended).  Otherwise a session whose background children still run ends
    ``incomplete/children_unfinished`` unless the contract's
    ``allow_unfinished_children`` says the job does not depend on them.
    """
    if action.state is TerminalState.COMPLETED and signals.team is not None:
        gate = team_gate(signals.team)
        if isinstance(gate, TeamWait):
            return gate
        if isinstance(gate, TeamNudge):
            if state.turns >= config.max_steps:
                return _finish(TerminalState.INCOMPLETE, ReasonCode.MAX_STEPS)
            return _prompt(state, signals, {"kind": "team", "nudge": gate.kind}, gate.text, "team")
    if (
        action.state is TerminalState.COMPLETED
        and signals.unfinished_children
        and not config.contract.allow_unfinished_children
    ):
        return _finish(TerminalState.INCOMPLETE, ReasonCode.CHILDREN_UNFINISHED)
    return _finish(action.state, action.reason, answer)


def _unique_ids(state: RunState, calls: Sequence[ToolCall], turn: int) -> list[ToolCall]:
    """Make call ids unique within the run (servers reuse ``call_0`` per reply)."""
    known = state.calls
    seen: set[str] = set()
    out: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.call_id or f"call_t{turn}_{index}"
        candidate, n = call_id, 1
        while candidate in seen or candidate in known:
            n += 1
            candidate = f"{call_id}#{n}"
        seen.add(candidate)
        out.append(
            call if candidate == call.call_id else call.model_copy(update={"call_id": candidate})
        )
    return out


def turn_events(state: RunState, turn: ProviderTurn, *, now: datetime) -> tuple[Event, ...]:
    """Events of one provider turn, committed in ONE transaction (section 3 step 3).

    ``assistant_output`` first, then every ``tool_call`` in provider order,
    then one ``provider_anomaly`` per irregularity the parser reported and per
    call id this function had to rename.
    """
    index = state.turns
    # Admitted first: storable ids and arguments, or an error the model sees (core/admission.py).
    admitted = [admit_call(c) for c in turn.tool_calls]
    calls = _unique_ids(state, [c for c, _ in admitted], index)
    anomalies = _anomalies(turn, admitted, calls)
    events = [_event(state, 0, EventType.ASSISTANT_OUTPUT, _turn_payload(turn, index, calls), now)]
    for i, call in enumerate(calls):
        events.append(
            _event(
                state,
                len(events),
                EventType.TOOL_CALL,
                {**call_payload(call, turn=index, index=i), **admitted[i][1]},
                now,
                call.call_id,
            )
        )
    for anomaly in anomalies:
        events.append(
            _event(
                state,
                len(events),
                EventType.PROVIDER_ANOMALY,
                {"code": anomaly.code, "detail": anomaly.detail, "turn": index},
                now,
            )
        )
    return tuple(events)


def _anomalies(
    turn: ProviderTurn, admitted: Sequence[tuple[ToolCall, Any]], calls: Sequence[ToolCall]
) -> list[Anomaly]:
    """The parser's anomalies, plus the call ids renamed and the calls made storable."""
    anomalies = list(turn.anomalies)
    renamed = [
        (a.call_id, b.call_id)
        for (a, _), b in zip(admitted, calls, strict=True)
        if a.call_id != b.call_id
    ]
    if renamed:
        anomalies.append(Anomaly(code="call_id_reused", detail={"renamed": renamed}))
    changed = [
        b.call_id
        for given, (a, _), b in zip(turn.tool_calls, admitted, calls, strict=True)
        if a is not given
    ]
    if changed:
        anomalies.append(Anomaly(code="call_unstorable", detail={"call_ids": changed}))
    return anomalies


def _turn_payload(turn: ProviderTurn, index: int, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The ``assistant_output`` payload of a turn."""
    payload: dict[str, Any] = {
        "text": turn.text,
        "turn": index,
        "stop_reason": turn.stop_reason.value,
        "raw_stop_reason": turn.raw_stop_reason,
        "usage": turn.usage.model_dump() if turn.usage else None,
        "model": turn.model,
        "call_ids": [c.call_id for c in calls],
    }
    if turn.refusal:
        payload["refusal"] = turn.refusal
    if turn.content_blocks:
        payload["content_blocks"] = [dict(b) for b in turn.content_blocks]
    return payload


def result_events(
    state: RunState, results: Sequence[CallResult], *, now: datetime
) -> tuple[Event, ...]:
    """``tool_result`` events of one batch, in the order given (provider order)."""
    return tuple(
        _event(
            state,
            i,
            EventType.TOOL_RESULT,
            result_payload(
                call_id=r.call_id,
                name=r.name,
                status=r.status,
                content=r.content,
                evidence_kind=r.evidence_kind,
            ),
            now,
            r.call_id,
        )
        for i, r in enumerate(results)
    )


def terminal_event(state: RunState, finish: Finish, *, now: datetime) -> Event:
    """The run's one ``terminal`` event."""
    return _event(
        state,
        0,
        EventType.TERMINAL,
        {
            "state": finish.state.value,
            "reason": finish.reason.value,
            "failure_code": finish.failure_code.value if finish.failure_code else None,
            "final_text": finish.final_text,
        },
        now,
    )
