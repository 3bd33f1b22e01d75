"""The part of a session delivery that runs while this process owns the lease.

DESIGN.md sections 3, 4 and 8: recover what a previous owner left open,
drive the run through the effect interpreter (:mod:`~nahida_workers.runtime.ownership.driver`),
seal exactly one terminal state per run, and start the next run from input
that arrived after a seal.  Every write is a named commit point of
:class:`~nahida_workers.runtime.commits.points.CommitPoints`, which the owner has.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError

from nahida_workers.core.children import TASK_TOOL
from nahida_workers.core.events import FailureCode, ReasonCode
from nahida_workers.core.inbox import inbox_events
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.policy.goals import GOAL_TOOL
from nahida_workers.core.records import (
    InboxKind,
    InboxStatus,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.core.recovery import recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.errors import (
    ConfigError,
    LeaseLostError,
    LedgerError,
    RunError,
    StaleEpochError,
    WorkspaceUnavailableError,
    WorktreeUnavailableError,
)
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.logs import bind_log_context
from nahida_workers.ports import Fence
from nahida_workers.runtime.artifacts import artifact_problem, offer_artifact_tool
from nahida_workers.runtime.children.report import child_report
from nahida_workers.runtime.children.spawn import Spawner
from nahida_workers.runtime.children.worktree import (
    isolate,
    isolate_top_level,
    isolated,
    top_level_isolated,
)
from nahida_workers.runtime.commits.points import CommitPoints, Family
from nahida_workers.runtime.control.cancel import cancel_closed
from nahida_workers.runtime.memory import SessionMemory
from nahida_workers.runtime.ownership.driver import RunDriver
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.runtime.ownership.history import session_history
from nahida_workers.runtime.ownership.outcome import HandedOver, SessionOutcome
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.teams.wiring import TEAM_TOOL_NAMES, team_wiring
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.remember import Remember
from nahida_workers.tools.task_output import TaskOutput

if TYPE_CHECKING:
    from nahida_workers.runtime.ownership.delivery import DeliveryPorts

__all__ = ["SessionOwner"]

log = logging.getLogger(__name__)


def _spec_of(session: SessionRecord) -> SessionSpec:
    try:
        return SessionSpec.model_validate(session.config)
    except ValidationError as exc:
        raise ConfigError(f"session config snapshot is invalid: {exc}") from None


class SessionOwner:
    """The part of a delivery that runs while this process owns the lease.

    Args:
        runner: the ports and settings of the delivery.
        session: the session row (read after the epoch bump).
        fence: the session id and this owner's epoch (section 4).
        heartbeat: the lease heartbeat.

    Attributes:
        commits: every commit point this owner writes through.
    """

    def __init__(
        self, runner: DeliveryPorts, session: SessionRecord, fence: Fence, heartbeat: Heartbeat
    ) -> None:
        self.r = runner
        self.session = session
        #: The workspace as submitted (``self.session`` may move to a worktree of it).
        self.workspace = session.workspace
        self.fence = fence
        self.commits = CommitPoints(
            runner.ledger,
            runner.clock,
            fence,
            heartbeat,
            outage_s=runner.ledger_outage_s,
            seal_outage_s=runner.ledger_seal_outage_s,
            cancel_seen=session.cancel_requested_at is not None,
        )
        self.commits.family = self._family()

    def _family(self) -> Family | None:
        """The child-session wiring of this session (section 8), when it has any."""
        spec = self.session.config
        tools = spec.get("tools") or ()
        # Task starts children; a goal (or UpdateGoal) starts verifiers (section 6).
        uses_task = TASK_TOOL in tools or GOAL_TOOL in tools or spec.get("goal") is not None
        if not uses_task and self.session.parent_id is None:
            return None
        children = child_ledger(self.r.ledger)
        spawner = Spawner(
            self.r.ledger,
            children,
            self.session,
            _spec_of(self.session),
            self.r.child_limits,
            self.r.worktrees,
            team_ledger(self.r.ledger),
        )
        family = Family(
            children, spawner, self.session.parent_id, self.r.publish, self.r.inbox_limits
        )
        publish = self.r.publish
        if publish is not None:

            def cancel(records: Sequence[OutboxRecord]) -> None:
                cancel_closed(
                    self.r.ledger,
                    self.r.leases,
                    self.r.clock,
                    publish,
                    records,
                    inbox_limits=self.r.inbox_limits,
                    sink=self.r.sink,
                )

            family.cancel_children = cancel
        return family

    # -- the delivery ------------------------------------------------------------
    def run(self) -> SessionOutcome:
        """Run the open run; then, while the inbox holds input, the next runs."""
        outcome = SessionOutcome.ALREADY_DONE
        while True:
            run = None
            if outcome is SessionOutcome.ALREADY_DONE:  # after a seal no run is open
                run = self._open_run()
            if run is None:
                run = self._next_run()
            if run is None:
                if outcome is SessionOutcome.ALREADY_DONE:
                    self.commits.close_session()
                return outcome
            if self._run_one(run):
                return SessionOutcome.PARKED
            outcome = SessionOutcome.FINISHED

    def abandon(
        self,
        reason: ReasonCode = ReasonCode.ABANDONED,
        code: FailureCode = FailureCode.ABANDONED,
    ) -> None:
        """Seal the open run ``failed/<reason>`` after closing its orphan calls.

        ``abandoned`` (the sweeper: no owner, no progress) by default;
        ``poison_session`` when deliveries kept crashing (``runtime/ownership/redelivery.py``).
        """
        run = self._open_run()
        if run is None:
            self.commits.close_session()
            return
        events, receipts = self.r.ledger.load_run(self.fence, run.run_id)
        state = RunState.from_ledger(run.run_id, events, receipts)
        recovered = recovery_events(state, now=self.r.clock.now(), epoch=self.fence.epoch)
        self.commits.commit_recovery(state, recovered)
        log.warning("run %s: sealing it failed/%s", run.run_id, reason.value)
        self.commits.seal_failed(state, run, reason, code)

    def _open_run(self) -> RunRecord | None:
        runs = self.r.ledger.runs_of(self.session.session_id)
        return next((r for r in reversed(runs) if r.terminal_state is None), None)

    def _next_run(self) -> RunRecord | None:
        """Input that arrived after the last run sealed starts the next run (section 8)."""
        pending = [
            m
            for m in self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])
            if m.kind is not InboxKind.BACKGROUND  # child completions are adopted, not input
        ]
        if not pending:
            return None
        spec = SessionSpec.model_validate(self.session.config)
        now = self.r.clock.now()
        runs = self.r.ledger.runs_of(self.session.session_id)
        if runs and runs[-1].started_at >= now:  # runs are ordered by start: keep them so
            now = runs[-1].started_at + timedelta(microseconds=1)
        provider, model = spec.labels()
        run = RunRecord(
            run_id=uuid.uuid4().hex,
            session_id=self.session.session_id,
            provider=provider,
            model=model,
            completion_contract=spec.contract,
            trace_id=uuid.uuid4().hex,
            started_at=now,
        )
        events = inbox_events(RunState(run_id=run.run_id), pending, now=now)
        self.commits.open_run(run, events, [m.message_id for m in pending])
        log.info(
            "session %s: run %s started from %d inbox message(s)",
            self.session.session_id,
            run.run_id,
            len(pending),
        )
        return run

    def _run_one(self, run: RunRecord) -> bool:
        """Drive one run; True when it parked (section 8) instead of reaching a terminal state."""
        bind_log_context(session_id=run.session_id, run_id=run.run_id, trace_id=run.trace_id)
        log.info("session %s: run %s, epoch %s", run.session_id, run.run_id, self.fence.epoch)
        state = self._load(run)
        try:
            return self._drive(state, run)
        except LeaseLostError as exc:
            # The record says why this owner stopped (lands only if no one took over yet).
            self.commits.record_loss(state, exc.reason)
            raise
        except (StaleEpochError, HandedOver):
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
        return False

    def _load(self, run: RunRecord) -> RunState:
        """The run's committed state, with the session's earlier runs as history."""
        events, receipts = self.r.ledger.load_run(self.fence, run.run_id)
        history, index = session_history(self.r.ledger, self.session.session_id, run.run_id)
        state = RunState.from_ledger(run.run_id, events, receipts, history=history, run_index=index)
        self.commits.inbox_pending = sum(
            1
            for m in self.r.ledger.inbox(self.session.session_id, statuses=[InboxStatus.PENDING])
            if m.next_turn
        )
        return state

    def _drive(self, state: RunState, run: RunRecord) -> bool:
        """Recover, check the prompt artifacts, then hand the run to the interpreter.

        Returns True when the run parked on its children (section 8).
        """
        if not self._isolate(state, run):
            return False
        spec = _spec_of(self.session)
        # Task is run by the runtime itself, not by a tool (runtime/children/spawn.py);
        # the team tools and TodoWrite are bound to this session (runtime/teams/).
        tools = tuple(t for t in spec.tools if t != TASK_TOOL and t not in TEAM_TOOL_NAMES)
        registry, artifacts = offer_artifact_tool(
            self.r.registry_for(spec.model_copy(update={"tools": tools})),
            self.r.ledger.get_artifact,
            [*state.history, *state.events],
        )
        team = team_wiring(self.r, self.session, spec, self.commits)
        if team is not None:
            for tool in team.tools:
                registry = registry.with_tool(tool)
        family = self.commits.family
        if family is not None and TASK_TOOL in spec.tools:  # read children by id (section 8)
            registry = registry.with_tool(
                TaskOutput(
                    lambda task_id: child_report(
                        self.r.ledger, family.children, self.session.session_id, task_id
                    )
                )
            )
        self._recover(state, run, registry)
        problem = artifact_problem(self.r.ledger.get_artifact, artifacts)
        if problem is not None and state.terminal is None:
            log.error("run %s: %s; failing it before any provider call", run.run_id, problem)
            self.commits.seal_failed(
                state,
                run,
                ReasonCode.PROMPT_ARTIFACT_INVALID,
                FailureCode.PROMPT_ARTIFACT_INVALID,
            )
            return False
        memory = self._memory(spec)
        if memory is not None:
            registry = registry.with_tool(Remember(memory))
        driver = RunDriver(self.r, self.session, spec, self.commits, state, run, registry)
        driver.team = team.session if team is not None else None
        if memory is not None:
            driver.attach_memory(memory)
        driver.drive()
        return driver.parked

    def _memory(self, spec: SessionSpec) -> SessionMemory | None:
        """The workspace memory of a job with ``memory: true`` (docs/memory.md), else None.

        Keyed by the workspace the session was submitted with (a worktree's
        session shares its repository's memory).
        """
        if not spec.memory.enabled:
            return None
        family = self.commits.family
        link = family.spawner.link() if family is not None else None
        return SessionMemory(
            self.r.ledger,
            self.r.clock,
            self.fence,
            self.commits.heartbeat,
            workspace=self.workspace,
            root_id=(link.root_id if link is not None else None) or self.session.session_id,
            spec=spec.memory,
        )

    def _isolate(self, state: RunState, run: RunRecord) -> bool:
        """An ``isolation: worktree`` session runs in its own worktree (children/worktree.py).

        A child asks for it in its Task call (lineage); a top-level session in
        its job (``isolation: worktree``).  Both get the same launcher: the
        repository lock, the recorded base, the result branch.  Returns False
        when the run was sealed ``failed/worktree_unavailable`` (a parent then
        adopts an error instead of waiting; case B22).
        """
        if state.terminal is not None:
            return True
        family = self.commits.family
        link = family.spawner.link() if family is not None else None
        if link is not None:
            if not isolated(link):
                return True
        elif self.session.parent_id is not None or not top_level_isolated(self.session.config):
            return True
        manager = self.r.worktrees
        try:
            if manager is None:
                raise WorktreeUnavailableError("this worker has no worktree manager")
            if link is not None:
                worktree = isolate(manager, self.session.workspace, self.session.session_id, link)
            else:
                worktree = isolate_top_level(
                    manager, self.session.workspace, self.session.session_id
                )
        except (WorktreeUnavailableError, WorkspaceUnavailableError) as exc:
            log.error("run %s: no worktree: %s", run.run_id, exc)
            self.commits.seal_failed(
                state, run, ReasonCode.WORKTREE_UNAVAILABLE, FailureCode.WORKTREE_UNAVAILABLE
            )
            return False
        self.commits.worktree = (manager, worktree)
        self.session = self.session.model_copy(update={"workspace": str(worktree.workspace)})
        return True

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
        self.commits.commit_recovery(state, recovered)

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
        self.commits.seal_failed(state, run, reason, code)
