"""The effect interpreter: performs the pure loop's decisions over the ports.

DESIGN.md sections 3 and 9.  :func:`~nahida_workers.core.loop.decide` returns
one decision value at a time; :class:`RunDriver` has one small
``_apply_<decision>`` method per value (the way temporalio's workflow
instance has one ``_apply_<job>`` per activation job), and every write goes
through a named commit point of :class:`~nahida_workers.runtime.commits.points.CommitPoints`.
A new decision (parking a session on its children, say) is one more case in
:meth:`RunDriver._apply` and one more method here.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, assert_never

from nahida_workers import metrics
from nahida_workers.constants import CANCEL_POLL_S
from nahida_workers.core.children import (
    TASK_TOOL,
    AdoptChildren,
    ChildView,
    Park,
    adopted_result,
    leading_task_calls,
    task_schema,
)
from nahida_workers.core.context import bound_instructions, context_control
from nahida_workers.core.events import (
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ReasonCode,
    TerminalState,
    VerificationStatus,
)
from nahida_workers.core.facts import Timer, budget_timer
from nahida_workers.core.handover import HandoverReason, lease_event
from nahida_workers.core.inbox import inbox_events
from nahida_workers.core.loop import (
    AdoptVerdict,
    CallProvider,
    CallResult,
    ClaimInbox,
    Decision,
    Done,
    Finish,
    LoopConfig,
    Persist,
    ReadInstructions,
    RecordBase,
    RunBatch,
    RunHooks,
    Signals,
    StartVerification,
    TeamWait,
    decide,
    final_text_for,
)
from nahida_workers.core.messages import StopReason, ToolCall
from nahida_workers.core.policy.goals import GOAL_TOOL
from nahida_workers.core.policy.verification import VerifierView, pending_verifier
from nahida_workers.core.receipts import idempotency_key
from nahida_workers.core.records import InboxKind, InboxMessage, InboxStatus, RunRecord
from nahida_workers.core.state import RunState
from nahida_workers.core.team_gate import TeamView
from nahida_workers.errors import ProviderError, ProviderProtocolError
from nahida_workers.runtime.children.spawn import child_views, completion_prefix
from nahida_workers.runtime.children.verifier import verifier_view
from nahida_workers.runtime.commits.points import CommitPoints
from nahida_workers.runtime.context import read_instruction_files
from nahida_workers.runtime.fanout.calls import CallJob, Execution
from nahida_workers.runtime.fanout.prestart import FallbackGuard, PreStart
from nahida_workers.runtime.observe.observer import Observer
from nahida_workers.runtime.ownership.hooks import StopHookContext, run_stop_hooks
from nahida_workers.runtime.ownership.outcome import HandedOver
from nahida_workers.runtime.ownership.verifying import apply_verifier_step
from nahida_workers.runtime.spec import SessionSpec, bound_limits, policy_limits
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.team import SESSION_BOUND_TOOLS

if TYPE_CHECKING:
    from nahida_workers.core.records import SessionRecord
    from nahida_workers.ports import Provider
    from nahida_workers.runtime.memory import SessionMemory
    from nahida_workers.runtime.ownership.delivery import DeliveryPorts
    from nahida_workers.runtime.teams.session import TeamSession

__all__ = ["STARTS_WORK", "RunDriver", "loop_config"]

log = logging.getLogger(__name__)

#: Decisions that start new work (a provider turn, a tool batch, the stop hooks):
#: a worker that shuts down hands its sessions over instead (DESIGN.md section 8).
STARTS_WORK = (CallProvider, RunBatch, RunHooks)


def loop_config(spec: SessionSpec, registry: ToolRegistry, *, subagent: bool = False) -> LoopConfig:
    """What the pure loop needs to know of a session spec and its tools.

    ``subagent``: the session is a child session (the independent
    verification gate skips it, DESIGN.md section 6).
    """
    tools = registry.schemas()
    task_available = TASK_TOOL in spec.tools
    if task_available:  # the runtime runs Task calls itself (section 8)
        areas = spec.delegation.areas or None
        tools = (*tools, task_schema(sorted(spec.agents), areas=areas))

    def may_write(name: str) -> bool:
        tool = registry.get(name)
        return tool is not None and not tool.spec.read_only

    goals = spec.goal is not None or GOAL_TOOL in spec.tools
    provider = spec.provider

    return LoopConfig(
        system_prompt=spec.system_prompt,
        tools=tools,
        tool_choice=spec.tool_choice,
        may_fan_out=lambda name: registry.placement_of(name) is not None,
        contract=spec.contract,
        max_steps=spec.limits.max_steps,
        wall_clock_budget_s=spec.limits.wall_clock_budget_s,
        max_output_tokens=spec.limits.max_output_tokens,
        context_budget_tokens=spec.limits.context_budget_tokens,
        policy=policy_limits(spec.limits),
        bounds=bound_limits(spec.limits),
        stop_hooks=bool(spec.stop_hooks),
        delegation=spec.delegation_contract(),
        gate=spec.verification.gate(),
        subagent=subagent,
        task_available=task_available,
        goal=spec.goal,
        may_write=may_write,
        records_base=spec.may_verify() and (not subagent or goals),
        base_at_start=goals,
        # Only a trusted workspace speaks to the model (docs/concepts/context.md).
        instruction_files=spec.instruction_files if spec.trust_workspace else (),
        tool_calling=bool(provider.get("supports_tools", True)),
        named_tool_choice=bool(provider.get("named_tool_choice", True)),
        self_check_every=spec.limits.self_check_every,
    )


@dataclass
class _Turn:
    """What the interpreter carries from a provider turn to its first batch."""

    prestarted: PreStart | None = None


class RunDriver:
    """Drives one open run to a terminal state (or to a lost lease).

    Args:
        runner: the ports and settings of the delivery.
        session: the session row.
        spec: the session's spec (from its config snapshot).
        commits: the owner's commit points.
        state: the run's committed state (it learns only what committed).
        run: the run row.
        registry: the tools the run may call.

    Attributes:
        team: the session's team, when it can be in one (set by the owner;
            read at a candidate answer, DESIGN.md section 8).
    """

    def __init__(
        self,
        runner: DeliveryPorts,
        session: SessionRecord,
        spec: SessionSpec,
        commits: CommitPoints,
        state: RunState,
        run: RunRecord,
        registry: ToolRegistry,
    ) -> None:
        self.r = runner
        self.session = session
        self.spec = spec
        self.commits = commits
        self.state = state
        self.run = run
        self.registry = registry
        self.config = loop_config(spec, registry, subagent=session.parent_id is not None)
        self.provider: Provider = runner.provider_for(spec)
        self.fallback = FallbackGuard()
        self.fallback.attach(self.provider)
        self.job = CallJob(
            run_id=run.run_id,
            workspace=Path(session.workspace).resolve(),
            epoch=commits.fence.epoch,
            max_output_bytes=spec.limits.tool_output_max_bytes,
            session_id=session.session_id,
            # A tool worker builds the registry by these names: never the tools
            # the runtime runs or binds itself (Task, the team tools).
            tools=tuple(t for t in spec.tools if t != TASK_TOOL and t not in SESSION_BOUND_TOOLS),
            bash_timeout_s=spec.limits.bash_timeout_s,
            should_abort=self._should_abort,
        )
        self.observer = Observer(
            runner.sink,
            spec.channel,
            session_id=session.session_id,
            run_id=run.run_id,
            trace_id=run.trace_id,
            contract=spec.contract,
        )
        commits.observer = self.observer
        self._turn = _Turn()
        self._cancel_checked_at: float | None = None
        self.parked = False
        self.team: TeamSession | None = None
        self.memory: SessionMemory | None = None

    def attach_memory(self, memory: SessionMemory) -> None:
        """Give the run its workspace memory (``runtime/memory.py``): read once per delivery."""
        self.memory = memory
        self.config = replace(
            self.config,
            memory=memory.load(),
            memory_limit=memory.spec.max_items,
            workspace=str(self.job.workspace),
        )

    # -- the loop -----------------------------------------------------------------------
    def drive(self) -> None:
        """Ask the pure loop for a decision and perform it, until the run is terminal.

        Raises:
            HandedOver: the worker shuts down and the next decision would start
                work (section 8, shutdown); the ``handover`` event is committed.
            LeaseLostError / StaleEpochError: this owner lost the session.
        """
        while True:
            self.commits.heartbeat.check()
            self._note_lease()
            decision = decide(self.state, self.config, self._signals())
            if isinstance(decision, STARTS_WORK) and self.r.draining():
                self._hand_over()
            if not self._apply(decision):
                return

    def _note_lease(self) -> None:
        """Put the lease re-takes since the last boundary on the run's record (section 4)."""
        notes = self.commits.heartbeat.take_notes()
        if notes:
            now = self.r.clock.now()
            epoch = self.commits.fence.epoch
            events: list[Event] = []
            for note in notes:
                event = lease_event(self.state, note.event, note.reason, epoch=epoch, now=now)
                events.append(event.model_copy(update={"sequence": event.sequence + len(events)}))
            self.commits.commit_control(self.state, events)

    def _hand_over(self) -> NoReturn:
        """Stop at this boundary: commit the ``handover`` event and end the delivery.

        Calls pre-started during the last turn's stream (read-only ones) are
        aborted: they count as never started, and the next owner runs them.
        """
        prestarted, self._turn = self._turn.prestarted, _Turn()
        if prestarted is not None:
            prestarted.abort()
        self.commits.commit_handover(self.state, HandoverReason.WORKER_SHUTDOWN)
        log.info(
            "run %s: worker shutting down; handed over with %d call(s) not started",
            self.run.run_id,
            len(self.state.pending_calls()),
        )
        raise HandedOver(self.run.run_id)

    def _signals(self) -> Signals:
        now = self.r.clock.now()
        return Signals(
            now=now,
            cancel_requested=self.commits.cancel_seen,
            pending_steering=self.commits.inbox_pending,
            elapsed_s=(now - self.run.started_at).total_seconds(),
            children=self._children(),
            unfinished_children=self._unfinished(),
            verifier=self._verifier(),
            team=self._team(),
        )

    def _verifier(self) -> VerifierView | None:
        """What became of the pending verifier child (section 6), when one is pending."""
        start = pending_verifier(self.state)
        return verifier_view(self.r.ledger, start.child) if start is not None else None

    def _team(self) -> TeamView | None:
        """The session's team, read only when the run's last step is a candidate answer."""
        if self.team is None:
            return None
        last = self.state.last_of(
            EventType.ASSISTANT_OUTPUT, EventType.TOOL_RESULT, EventType.USER_INPUT
        )
        if (
            last is None
            or last.type is not EventType.ASSISTANT_OUTPUT
            or last.payload.get("call_ids")
            or last.payload.get("stop_reason") == StopReason.PAUSE_TURN.value
        ):
            return None
        return self.team.view()

    def _unfinished(self) -> tuple[str, ...]:
        """This session's children that have not ended (section 8), when it has a family."""
        family = self.commits.family
        if family is None or TASK_TOOL not in self.spec.tools:
            return ()
        return tuple(family.running())

    def _children(self) -> dict[str, ChildView]:
        """What became of the children of the Task calls at the head of the pending calls."""
        head = leading_task_calls(self.state.pending_calls())
        family = self.commits.family
        if not head:
            return {}
        if family is None:
            return {c.call_id: ChildView(c.call_id, refused="Task: not available") for c in head}
        return child_views(
            self.r.ledger, family.spawner, self.run.run_id, head, self._respawn, self._reopen
        )

    def _reopen(self, child: str, key: str) -> None:
        """Re-queue a resumed child that is ``done`` with its prompt still pending."""
        self.commits.reopen_child(child, f"{key}:{uuid.uuid4().hex}")

    def _respawn(self, call: ToolCall) -> str | None:
        """Re-attempt a refused spawn (idempotent, limits re-checked); its refusal or None."""
        return self.commits.respawn_child(self.run.run_id, call)

    def _apply(self, decision: Decision) -> bool:
        """Perform one decision; False when the run needs nothing more from this owner."""
        match decision:
            case Done():
                return False
            case Finish():
                return self._apply_finish(decision)
            case Persist() | ReadInstructions():
                return self._apply_persist(decision)
            case CallProvider():
                return self._apply_call_provider(decision)
            case RunBatch():
                return self._apply_run_batch(decision)
            case RunHooks():
                return self._apply_run_hooks(decision)
            case ClaimInbox():
                return self._apply_claim_inbox(decision)
            case Park():
                return self._apply_park(decision)
            case AdoptChildren():
                return self._apply_adopt(decision)
            case RecordBase() | StartVerification() | AdoptVerdict():
                return apply_verifier_step(self, decision)
            case TeamWait():
                return self._apply_team_wait(decision)
            case unreachable:
                assert_never(unreachable)

    # -- one method per decision ------------------------------------------------------------
    def _apply_finish(self, finish: Finish) -> bool:
        if finish.state is TerminalState.CANCELLED:
            self._fold_steering_into_cancelled()
        self.commits.seal(self.state, self.run, finish)
        return False

    def _apply_persist(self, decision: Persist | ReadInstructions) -> bool:
        if isinstance(decision, ReadInstructions):
            decision = self._instructions(decision)
        self.commits.commit_control(self.state, decision.events)
        return True

    def _apply_call_provider(self, decision: CallProvider) -> bool:
        if self.memory is not None:
            self.memory.note(decision.memory)
        prestart = self._prestart()
        self.fallback.arm(self.job, prestart)
        try:
            asked = self.r.clock.monotonic()
            turn = self.provider.complete(
                decision.request, on_tool_call=prestart.offer if prestart else None
            )
            metrics.observe_provider_call(
                self.run.provider, self.run.model, self.r.clock.monotonic() - asked, turn.usage
            )
            self.commits.commit_turn(self.state, turn)
        except ProviderError as exc:
            if prestart:
                prestart.abort()
            if isinstance(exc, ProviderProtocolError):
                self.observer.protocol_error()
            self.commits.seal(self.state, self.run, _provider_failure(exc))
            return False
        except BaseException:
            if prestart:
                prestart.abort()  # the turn is not committed: nothing it started counts
            raise
        self._turn = _Turn(prestarted=prestart)
        return True

    def _apply_run_batch(self, decision: RunBatch) -> bool:
        batch = decision.batch
        prestarted, self._turn = self._turn.prestarted, _Turn()
        started = prestarted.take(batch) if prestarted else None
        if not batch.parallel:
            # A side effect is about to start: the lease must still be ours
            # now, not just at the last heartbeat (a paused owner, section 4).
            self.commits.heartbeat.confirm()
        self.observer.tools_started(batch.calls)
        executions = self.r.executor.run_batch(batch, self.job, self.registry, started=started)
        return self.commits.commit_results(self.state, self.run, executions)

    def _apply_run_hooks(self, decision: RunHooks) -> bool:
        event = self._stop_hook_event(decision.candidate_seq, decision.answer)
        self.commits.commit_control(self.state, [event])
        return True

    def _instructions(self, decision: ReadInstructions) -> Persist:
        """The workspace's instruction files, read once, as the run's ``context`` control."""
        found = read_instruction_files(self.job.workspace, decision.paths)
        payload = context_control(bound_instructions(found), asked=decision.paths)
        event = Event(
            run_id=self.run.run_id,
            sequence=self.state.next_sequence,
            type=EventType.CONTROL,
            payload=payload,
            created_at=self.r.clock.now(),
        )
        return Persist((event,))

    def _apply_claim_inbox(self, _decision: ClaimInbox) -> bool:
        waiting = [m for m in self._pending_inbox() if m.next_turn]
        if not waiting:
            self.commits.inbox_pending = 0  # the count was stale
            return True
        self.commits.commit_control(
            self.state,
            inbox_events(self.state, waiting, now=self.r.clock.now()),
            claims=[m.message_id for m in waiting],
        )
        return True

    def _apply_park(self, park: Park) -> bool:
        """Section 8: park (status waiting, delivery ends) -- or, children done, decide again."""
        if self.commits.park(
            self.state, self.run, park, budget_s=self.spec.limits.wall_clock_budget_s
        ):
            self.parked = True
            return False
        return True

    def _apply_team_wait(self, wait: TeamWait) -> bool:
        """Section 8: park on the team -- or, when committed facts changed, decide again."""
        assert self.team is not None  # a TeamWait needs a team view, which needs a team
        if self.team.park(self.state, self.run.run_id, wait, timer=self._budget_timer()):
            if self.commits.observer is not None:
                self.commits.observer.committed([self.state.events[-1]])
            log.info(
                "run %s parked on team %s (%s)", self.run.run_id, wait.team_id, wait.waiting_on
            )
            self.parked = True
            return False
        self._refresh_inbox_and_cancel()
        return True

    def _budget_timer(self) -> Timer:
        """The run's wall-clock budget as a durable timer (armed when the session parks)."""
        me = self.session.session_id
        family = self.commits.family
        root = family.spawner.link().root_id if family is not None else None
        return budget_timer(
            me,
            root or me,
            self.run.run_id,
            started_at=self.run.started_at,
            budget_s=self.spec.limits.wall_clock_budget_s,
            now=self.r.clock.now(),
        )

    def _refresh_inbox_and_cancel(self) -> None:
        """After a refused park: the inbox count and cancel flag as committed now."""
        session = self.r.ledger.get_session(self.session.session_id)
        self.commits.cancel_seen = session is not None and session.cancel_requested_at is not None
        self.commits.inbox_pending = sum(1 for m in self._pending_inbox() if m.next_turn)

    def _apply_adopt(self, adopt: AdoptChildren) -> bool:
        """Each child's outcome as its call's result, in call order; completions claimed."""
        now = self.r.clock.now()
        executions = [self._adopted(view, now) for view in adopt.views]
        # A background call is settled when its child starts: its completion stays pending.
        wanted = tuple(
            completion_prefix(v.session_id)
            for v in adopt.views
            if v.session_id and not v.background
        )
        claims = [
            m.message_id
            for m in self._pending_inbox()
            if m.kind is InboxKind.BACKGROUND and wanted and m.message_id.startswith(wanted)
        ]
        return self.commits.commit_results(self.state, self.run, executions, claims=claims)

    def _adopted(self, view: ChildView, now: datetime) -> Execution:
        call = self.state.calls[view.call_id]
        status, content = adopted_result(view)
        evidence: dict[str, object] = {
            "child_session_id": view.session_id,
            "child_run_id": view.run_id,
            "child_state": view.state.value if view.state else None,
            "child_reason": view.reason,
        }
        if view.background:
            evidence["mode"] = "background"
        if view.commit is not None:
            evidence["commit"] = view.commit
        if view.refused is not None:
            evidence = {"error_code": "task_refused", "refused": view.refused}
        receipt = ExecutionReceipt(
            run_id=self.run.run_id,
            call_id=call.call_id,
            tool_name=call.name,
            status=status,
            started_at=now,
            finished_at=now,
            input_fingerprint=call.fingerprint,
            evidence=evidence,
            evidence_kind=EvidenceKind.NONE,
            verification_status=VerificationStatus.NOT_APPLICABLE,
            idempotency_key=idempotency_key(self.run.run_id, call.call_id),
            epoch=self.commits.fence.epoch,
        )
        return Execution(CallResult(call.call_id, call.name, status, content), receipt)

    # -- helpers ------------------------------------------------------------------------------
    def pending_inbox(self) -> list[InboxMessage]:
        """The session's pending inbox messages."""
        return self._pending_inbox()

    def _pending_inbox(self) -> list[InboxMessage]:
        return self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])

    def _fold_steering_into_cancelled(self) -> None:
        """Record steering sent before the cancel in the run it addressed.

        A next-turn message enqueued before the cancel request was meant for
        the work being cancelled: it is claimed by this run (one
        ``user_input``, acknowledged by the seal) instead of starting a new
        run.  Input enqueued after the request, or ``--after-run``, still
        starts the next run.
        """
        session = self.r.ledger.get_session(self.session.session_id)
        cancelled_at = session.cancel_requested_at if session is not None else None
        if cancelled_at is None:
            return
        earlier = [m for m in self._pending_inbox() if m.next_turn and m.created_at <= cancelled_at]
        if earlier:
            self.commits.commit_control(
                self.state,
                inbox_events(self.state, earlier, now=self.r.clock.now()),
                claims=[m.message_id for m in earlier],
            )

    def _stop_hook_event(self, candidate: int, answer: str) -> Event:
        """Run the stop hooks on a candidate answer; their verdict as a control event."""
        verdict = run_stop_hooks(
            self.spec.stop_hooks,
            StopHookContext(
                session_id=self.session.session_id,
                run_id=self.run.run_id,
                answer=answer,
                workspace=Path(self.session.workspace),
            ),
            registered=self.r.stop_hooks,
            timeout_s=self.spec.limits.stop_hook_timeout_s,
        )
        return Event(
            run_id=self.run.run_id,
            sequence=self.state.next_sequence,
            type=EventType.CONTROL,
            payload={
                "kind": "stop_hook",
                "candidate": candidate,
                "verdict": verdict.verdict,
                "message": verdict.message,
                "hook": verdict.hook,
            },
            created_at=self.r.clock.now(),
        )

    def _prestart(self) -> PreStart | None:
        """A pre-start for the next provider turn, when the executor offers one."""
        if not self.r.prestart:
            return None
        return self.r.executor.prestart(self.job, self.registry)

    def _should_abort(self) -> bool:
        """Polled while a call or batch is outstanding: lease lost, budget spent, or cancel.

        The cancel flag is a ledger read; it is taken at most every
        ``CANCEL_POLL_S`` seconds (on the Clock port) so a long batch costs a
        handful of queries.  The wall-clock budget is checked too, so a tool
        that is stuck cannot keep a run past it.
        """
        if self.commits.heartbeat.lost:
            return True
        elapsed = (self.r.clock.now() - self.run.started_at).total_seconds()
        if elapsed >= self.spec.limits.wall_clock_budget_s:
            return True
        now = self.r.clock.monotonic()
        if self._cancel_checked_at is None or now - self._cancel_checked_at >= CANCEL_POLL_S:
            self._cancel_checked_at = now
            session = self.r.ledger.get_session(self.session.session_id)
            self.commits.cancel_seen = (
                session is not None and session.cancel_requested_at is not None
            )
        return self.commits.cancel_seen


def _provider_failure(exc: ProviderError) -> Finish:
    reason = (
        ReasonCode.PROVIDER_PROTOCOL_INVALID
        if isinstance(exc, ProviderProtocolError)
        else ReasonCode.PROVIDER_ERROR
    )
    state = TerminalState.FAILED
    return Finish(state, reason, final_text_for(state, reason), exc.failure_code)
