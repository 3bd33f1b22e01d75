"""The part of a session delivery that runs while this process owns the lease.

DESIGN.md sections 3 and 4: recover what a previous owner left open, drive
the pure loop (:mod:`nahida_workers.core.loop`) over the ports through the
commit points (:mod:`nahida_workers.runtime.commits`), seal exactly one
terminal state per run, and start the next run from input that arrived after
a seal.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from pydantic import ValidationError

from nahida_workers import metrics
from nahida_workers.core.events import (
    Event,
    EventType,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.inbox import inbox_events
from nahida_workers.core.loop import (
    CallProvider,
    ClaimInbox,
    Done,
    Finish,
    LoopConfig,
    Persist,
    RunBatch,
    RunHooks,
    Signals,
    decide,
    final_text_for,
    result_events,
    turn_events,
)
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.records import InboxStatus, RunRecord, SessionRecord
from nahida_workers.core.recovery import recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.errors import (
    ConfigError,
    LeaseLostError,
    LedgerError,
    LedgerIntegrityError,
    ProviderError,
    ProviderProtocolError,
    RunError,
    StaleEpochError,
)
from nahida_workers.logs import bind_log_context
from nahida_workers.ports import Fence
from nahida_workers.runtime.artifacts import artifact_problem, offer_artifact_tool
from nahida_workers.runtime.calls import CallJob
from nahida_workers.runtime.commits import CommitPoints
from nahida_workers.runtime.fanout import FanOutExecutor
from nahida_workers.runtime.heartbeat import Heartbeat
from nahida_workers.runtime.history import session_history
from nahida_workers.runtime.hooks import StopHookContext, run_stop_hooks
from nahida_workers.runtime.observe import Observer
from nahida_workers.runtime.prestart import FallbackGuard, PreStart
from nahida_workers.runtime.spec import SessionSpec, bound_limits, policy_limits
from nahida_workers.tools.base import ToolRegistry

if TYPE_CHECKING:
    from nahida_workers.runtime.session import SessionRunner

log = logging.getLogger(__name__)

#: Seconds between two reads of the cancel flag while tools are outstanding.
CANCEL_POLL_S = 1.0


class SessionOutcome(StrEnum):
    """What one ``run_session`` delivery did."""

    FINISHED = "finished"  # this delivery committed the terminal state
    LEASE_HELD = "lease_held"  # another live owner holds the lease: no-op
    ALREADY_DONE = "already_done"  # nothing left to run: no-op
    NOT_FOUND = "not_found"  # unknown session id: no-op
    LEASE_LOST = "lease_lost"  # lost the lease mid-run; the next owner continues


def _spec_of(session: SessionRecord) -> SessionSpec:
    try:
        return SessionSpec.model_validate(session.config)
    except ValidationError as exc:
        raise ConfigError(f"session config snapshot is invalid: {exc}") from None


class SessionOwner(CommitPoints):
    """The part of a delivery that runs while this process owns the lease."""

    def __init__(
        self, runner: SessionRunner, session: SessionRecord, fence: Fence, heartbeat: Heartbeat
    ) -> None:
        super().__init__(
            runner.ledger,
            runner.clock,
            fence,
            heartbeat,
            outage_s=runner.ledger_outage_s,
            cancel_seen=session.cancel_requested_at is not None,
        )
        self.r = runner
        self.session = session
        self._prestarted: PreStart | None = None
        self._cancel_checked_at = 0.0
        self._run_started_at: datetime | None = None
        self.spec: SessionSpec  # set by _run_one, from the session's config snapshot

    # -- the delivery ------------------------------------------------------------
    def run(self) -> SessionOutcome:
        """Run the open run; then, while the inbox holds input, the next runs."""
        outcome = SessionOutcome.ALREADY_DONE
        while True:
            run = None
            if outcome is SessionOutcome.ALREADY_DONE:  # after a seal no run is open
                runs = self.r.ledger.runs_of(self.session.session_id)
                run = next((r for r in reversed(runs) if r.terminal_state is None), None)
            if run is None:
                run = self._next_run()
            if run is None:
                if outcome is SessionOutcome.ALREADY_DONE:
                    with self.r.ledger.transaction(fence=self.fence) as tx:
                        self.r.ledger.set_session_status(
                            tx, self.session.session_id, SessionStatus.DONE, at=self.r.clock.now()
                        )
                return outcome
            self._run_one(run)
            outcome = SessionOutcome.FINISHED

    def abandon(
        self,
        reason: ReasonCode = ReasonCode.ABANDONED,
        code: FailureCode = FailureCode.ABANDONED,
    ) -> None:
        """Seal the open run ``failed/<reason>`` after closing its orphan calls.

        ``abandoned`` (the sweeper: no owner, no progress) by default;
        ``poison_session`` when deliveries kept crashing (``runtime/poison.py``).
        """
        runs = self.r.ledger.runs_of(self.session.session_id)
        run = next((r for r in reversed(runs) if r.terminal_state is None), None)
        if run is None:
            with self.r.ledger.transaction(fence=self.fence) as tx:
                self.r.ledger.set_session_status(
                    tx, self.session.session_id, SessionStatus.DONE, at=self.r.clock.now()
                )
            return
        events, receipts = self.r.ledger.load_run(self.fence, run.run_id)
        state = RunState.from_ledger(run.run_id, events, receipts)
        recovered = recovery_events(state, now=self.r.clock.now(), epoch=self.fence.epoch)
        if recovered:
            self.commit(state, recovered)
        log.warning("run %s: sealing it failed/%s", run.run_id, reason.value)
        self._seal_failed(state, run, reason, code)

    def _next_run(self) -> RunRecord | None:
        """Input that arrived after the last run sealed starts the next run."""
        pending = self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])
        if not pending:
            return None
        spec = SessionSpec.model_validate(self.session.config)
        now = self.r.clock.now()
        runs = self.r.ledger.runs_of(self.session.session_id)
        if runs and runs[-1].started_at >= now:  # runs are ordered by start: keep them so
            now = runs[-1].started_at + timedelta(microseconds=1)
        run = RunRecord(
            run_id=uuid.uuid4().hex,
            session_id=self.session.session_id,
            provider=str(spec.provider.get("name") or spec.provider.get("kind", "scripted")),
            model=str(spec.provider.get("model") or "unknown"),
            completion_contract=spec.contract,
            trace_id=uuid.uuid4().hex,
            started_at=now,
        )
        events = inbox_events(RunState(run_id=run.run_id), pending, now=now)
        with self.r.ledger.transaction(fence=self.fence) as tx:
            self.r.ledger.create_run(tx, run)
            self.r.ledger.append(tx, events)
            self.r.ledger.claim_inbox(tx, run.run_id, [m.message_id for m in pending], at=now)
            self.r.ledger.set_session_status(
                tx, self.session.session_id, SessionStatus.RUNNING, at=now
            )
        log.info(
            "session %s: run %s started from %d inbox message(s)",
            self.session.session_id,
            run.run_id,
            len(pending),
        )
        return run

    def _run_one(self, run: RunRecord) -> None:
        bind_log_context(session_id=run.session_id, run_id=run.run_id, trace_id=run.trace_id)
        log.info("session %s: run %s, epoch %s", run.session_id, run.run_id, self.fence.epoch)
        events, receipts = self.r.ledger.load_run(self.fence, run.run_id)
        history, index = session_history(self.r.ledger, self.session.session_id, run.run_id)
        state = RunState.from_ledger(run.run_id, events, receipts, history=history, run_index=index)
        self._inbox_pending = sum(
            1
            for m in self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])
            if m.next_turn
        )
        try:
            self.spec = _spec_of(self.session)
            registry, artifacts = offer_artifact_tool(
                self.r.registry_for(self.spec),
                self.r.ledger.get_artifact,
                [*state.history, *state.events],
            )
            self._recover(state, run, registry)
            problem = artifact_problem(self.r.ledger.get_artifact, artifacts)
            if problem is not None and state.terminal is None:
                log.error("run %s: %s; failing it before any provider call", run.run_id, problem)
                self._seal_failed(
                    state,
                    run,
                    ReasonCode.PROMPT_ARTIFACT_INVALID,
                    FailureCode.PROMPT_ARTIFACT_INVALID,
                )
                return
            self.drive(state, run, registry)
        except (LeaseLostError, StaleEpochError):
            raise
        except RunError as exc:
            if exc.retryable:
                raise  # the task retries; the next owner continues from the ledger
            reason = (
                ReasonCode.LEDGER_WRITE_FAILED
                if isinstance(exc, LedgerError)
                else ReasonCode.INTERNAL_ERROR
            )
            self._seal_after(state, run, exc, reason, exc.failure_code)
        except ConfigError as exc:
            self._seal_after(state, run, exc, ReasonCode.INVALID_CONFIG, FailureCode.INVALID_CONFIG)
        except Exception as exc:
            log.exception("run %s: unexpected error; sealing it failed", run.run_id)
            self._seal_after(state, run, exc, ReasonCode.INTERNAL_ERROR, FailureCode.INTERNAL_ERROR)

    def _seal_failed(
        self, state: RunState, run: RunRecord, reason: ReasonCode, code: FailureCode
    ) -> None:
        failed = TerminalState.FAILED
        self.seal(state, run, Finish(failed, reason, final_text_for(failed, reason), code))

    def _recover(self, state: RunState, run: RunRecord, registry: ToolRegistry) -> None:
        """Settle what the previous owner left open (core/recovery.py), once, in order."""

        def rerunnable(call: ToolCall) -> bool:
            tool = registry.get(call.name)
            return tool is not None and tool.spec.idempotent and call.arguments_error is None

        recovered = recovery_events(
            state, now=self.r.clock.now(), epoch=self.fence.epoch, rerunnable=rerunnable
        )
        if recovered:
            log.warning("run %s: recovery %s", run.run_id, recovered[0].payload)
            self.commit(state, recovered)

    def _seal_after(
        self,
        state: RunState,
        run: RunRecord,
        exc: BaseException,
        reason: ReasonCode,
        code: FailureCode,
    ) -> None:
        """Every run ends in a terminal state: a non-retryable failure seals it ``failed``."""
        if state.terminal is not None:
            raise exc
        log.error("run %s: %s: %s", run.run_id, reason.value, exc)
        failed = TerminalState.FAILED
        self.seal(state, run, Finish(failed, reason, final_text_for(failed, reason), code))

    def drive(self, state: RunState, run: RunRecord, registry: ToolRegistry) -> None:
        self._run_started_at = run.started_at
        self.observer = Observer(
            self.r.sink,
            self.spec.channel,
            session_id=self.session.session_id,
            run_id=run.run_id,
            trace_id=run.trace_id,
            contract=self.spec.contract,
        )
        provider = self.r.provider_for(self.spec)
        fallback = FallbackGuard()
        fallback.attach(provider)
        config = LoopConfig(
            system_prompt=self.spec.system_prompt,
            tools=registry.schemas(),
            tool_choice=self.spec.tool_choice,
            may_fan_out=lambda name: registry.placement_of(name) is not None,
            contract=self.spec.contract,
            max_steps=self.spec.limits.max_steps,
            wall_clock_budget_s=self.spec.limits.wall_clock_budget_s,
            max_output_tokens=self.spec.limits.max_output_tokens,
            context_budget_tokens=self.spec.limits.context_budget_tokens,
            policy=policy_limits(self.spec.limits),
            bounds=bound_limits(self.spec.limits),
            stop_hooks=bool(self.spec.stop_hooks),
        )
        job = CallJob(
            run_id=run.run_id,
            workspace=Path(self.session.workspace).resolve(),
            epoch=self.fence.epoch,
            max_output_bytes=self.spec.limits.tool_output_max_bytes,
            session_id=self.session.session_id,
            tools=tuple(self.spec.tools),
            bash_timeout_s=self.spec.limits.bash_timeout_s,
            should_abort=self._should_abort,
        )
        while True:
            self.heartbeat.check()
            now = self.r.clock.now()
            signals = Signals(
                now=now,
                cancel_requested=self._cancel_seen,
                pending_steering=self._inbox_pending,
                elapsed_s=(now - run.started_at).total_seconds(),
            )
            match decide(state, config, signals):
                case Done():
                    return
                case Finish() as finish:
                    if finish.state is TerminalState.CANCELLED:
                        self._fold_steering_into_cancelled(state)
                    self.seal(state, run, finish)
                    return
                case Persist(events=events):
                    self.commit(state, events)
                case CallProvider(request=request):
                    prestart = self._prestart(job, registry)
                    fallback.arm(job, prestart)
                    try:
                        asked = self.r.clock.monotonic()
                        turn = provider.complete(
                            request, on_tool_call=prestart.offer if prestart else None
                        )
                        metrics.observe_provider_call(
                            run.provider, run.model, self.r.clock.monotonic() - asked, turn.usage
                        )
                        self.commit(state, turn_events(state, turn, now=self.r.clock.now()))
                    except ProviderError as exc:
                        if prestart:
                            prestart.abort()
                        if isinstance(exc, ProviderProtocolError):
                            self.observer.protocol_error()
                        self.seal(state, run, _provider_failure(exc))
                        return
                    except BaseException:
                        if prestart:
                            prestart.abort()  # the turn is not committed: nothing it started counts
                        raise
                    self._prestarted = prestart
                case RunBatch(batch=batch):
                    started = self._prestarted.take(batch) if self._prestarted else None
                    self._prestarted = None
                    if not batch.parallel:
                        # A side effect is about to start: the lease must still be ours
                        # now, not just at the last heartbeat (a paused owner, section 4).
                        self.heartbeat.confirm()
                    self.observer.tools_started(batch.calls)
                    executions = self.r.executor.run_batch(batch, job, registry, started=started)
                    events = result_events(
                        state, [e.result for e in executions], now=self.r.clock.now()
                    )
                    try:
                        self.commit(state, events, [e.receipt for e in executions])
                    except (LeaseLostError, StaleEpochError):
                        raise
                    except (LedgerError, LedgerIntegrityError) as exc:
                        log.error("run %s: tool results not persisted: %s", run.run_id, exc)
                        # Only this owner knows the tools ran: it keeps its lease and
                        # retries the seal through a long outage (issue 11 item 10),
                        # so a later owner does not close the calls as interrupted
                        # and carry on as if nothing had been lost.
                        self.seal(
                            state,
                            run,
                            Finish(
                                TerminalState.FAILED,
                                ReasonCode.TOOL_PERSISTENCE_FAILED,
                                final_text_for(
                                    TerminalState.FAILED, ReasonCode.TOOL_PERSISTENCE_FAILED
                                ),
                                FailureCode.TOOL_PERSISTENCE_FAILED,
                            ),
                            within_s=max(self.r.ledger_seal_outage_s, self.outage_s),
                        )
                        return
                case RunHooks(candidate_seq=candidate, answer=answer):
                    self.commit(state, [self._stop_hook_event(state, run, candidate, answer)])
                case ClaimInbox():
                    waiting = [
                        m
                        for m in self.r.ledger.inbox(
                            self.session.session_id, statuses=[InboxStatus.PENDING]
                        )
                        if m.next_turn
                    ]
                    if not waiting:
                        self._inbox_pending = 0  # the count was stale
                        continue
                    self.commit(
                        state,
                        inbox_events(state, waiting, now=self.r.clock.now()),
                        claims=[m.message_id for m in waiting],
                    )
                case unreachable:
                    assert_never(unreachable)

    def _fold_steering_into_cancelled(self, state: RunState) -> None:
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
        earlier = [
            m
            for m in self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])
            if m.next_turn and m.created_at <= cancelled_at
        ]
        if earlier:
            self.commit(
                state,
                inbox_events(state, earlier, now=self.r.clock.now()),
                claims=[m.message_id for m in earlier],
            )

    def _stop_hook_event(
        self, state: RunState, run: RunRecord, candidate: int, answer: str
    ) -> Event:
        """Run the stop hooks on a candidate answer; their verdict as a control event."""
        verdict = run_stop_hooks(
            self.spec.stop_hooks,
            StopHookContext(
                session_id=self.session.session_id,
                run_id=run.run_id,
                answer=answer,
                workspace=Path(self.session.workspace),
            ),
            timeout_s=self.spec.limits.stop_hook_timeout_s,
        )
        return Event(
            run_id=run.run_id,
            sequence=state.next_sequence,
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

    def _prestart(self, job: CallJob, registry: ToolRegistry) -> PreStart | None:
        """A pre-start for the next provider turn, when the executor can fan out."""
        if isinstance(self.r.executor, FanOutExecutor) and self.r.prestart:
            return PreStart(self.r.executor, job, registry)
        return None

    def _cancel_requested(self) -> bool:
        session = self.r.ledger.get_session(self.session.session_id)
        return session is not None and session.cancel_requested_at is not None

    def _should_abort(self) -> bool:
        """Polled while a call or batch is outstanding: lease lost, budget spent, or cancel.

        The cancel flag is a ledger read; it is taken at most every
        ``CANCEL_POLL_S`` seconds so a long batch costs a handful of queries.
        The wall-clock budget is checked too, so a tool that is stuck cannot
        keep a run past it (issue 11 item 1).
        """
        if self.heartbeat.lost:
            return True
        started = self._run_started_at
        if started is not None:
            elapsed = (self.r.clock.now() - started).total_seconds()
            if elapsed >= self.spec.limits.wall_clock_budget_s:
                return True
        now = time.monotonic()
        if now - self._cancel_checked_at >= CANCEL_POLL_S:
            self._cancel_checked_at = now
            self._cancel_seen = self._cancel_requested()
        return self._cancel_seen


def _provider_failure(exc: ProviderError) -> Finish:
    reason = (
        ReasonCode.PROVIDER_PROTOCOL_INVALID
        if isinstance(exc, ProviderProtocolError)
        else ReasonCode.PROVIDER_ERROR
    )
    state = TerminalState.FAILED
    return Finish(state, reason, final_text_for(state, reason), exc.failure_code)
