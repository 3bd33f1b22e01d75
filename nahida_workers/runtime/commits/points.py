"""Every commit point of a session owner, by name (DESIGN.md sections 3, 4 and 8).

==================  =============================================================
commit point        what it writes, in one fenced transaction
==================  =============================================================
``open_run``        a run row started from inbox input, its ``user_input`` events,
                    the claims and ``sessions.status = running`` (section 8)
``commit_recovery`` what a previous owner left open, closed (``core/recovery.py``)
``commit_turn``     ``assistant_output`` and every ``tool_call`` of a provider turn
                    (section 3 step 3): if it fails, no tool starts
``commit_results``  every ``tool_result`` of a batch with its receipt (section 3
                    step 5); if that fails the run is sealed
                    ``failed/tool_persistence_failed``
``commit_control``  control events and the user input they inject (corrections,
                    bounds, stop-hook verdicts, the workspace base, a verifier's
                    adopted verdict) and inbox claims
``start_verifier``  a ``verifier_started`` event (with a goal's transition) and the
                    verifier child's rows (section 6; ``runtime/children/verifier.py``)
``seal``            a synthetic result + receipt for every call still open
                    (``core/sealing.py``), the terminal event, the run row, the
                    inbox acknowledgements and ``sessions.status = done``
``park``            a ``parked`` control event, ``sessions.status = waiting`` and the
                    awaited child ids -- or nothing, when every awaited child is
                    already done (section 8; serialised with the children's
                    completion posts on the session row lock)
``respawn_child``   a refused Task call's child, re-attempted under the fence (its
                    session, lineage, first run and outbox rows; section 8)
``reopen_child``    a resumed ``done`` child back to ``queued`` with its outbox row
                    (the child's rows, so not under this session's fence)
``close_session``   ``sessions.status = done`` when no run is left to seal
``commit_handover`` the ``handover`` control event of an owner whose worker shuts
                    down: the calls it committed and never started (section 8)
``record_loss``     a lost owner's ``lease``/``lost`` event: one attempt, landing only
                    while no later owner has bumped the epoch (section 4)
``take_over`` /     the owner epoch bump with the durable crash counter, and the
``hand_back``       clean hand-back (section 4; ``runtime/ownership/redelivery.py``)
==================  =============================================================

Every transaction is fenced with the epoch bumped when the lease was taken,
and a short ledger outage is ridden out without applying a commit twice
(``runtime/commits/outage.py``).  The run state learns only what committed.

Child sessions (DESIGN.md section 8, ``runtime/children/spawn.py``): ``commit_turn``
writes each Task call's child rows in its transaction; ``commit_results``
adopts child outcomes (claiming the completions that woke the parent); a
child's ``seal`` posts its completion to the parent in its transaction.
Outbox rows those commits write are published after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from nahida_workers import metrics
from nahida_workers.core.children import TASK_TOOL, Park
from nahida_workers.core.events import (
    Event,
    EventType,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.facts import budget_timer
from nahida_workers.core.handover import HandoverReason, handover_event, lease_event
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.loop import (
    Finish,
    final_text_for,
    result_events,
    terminal_event,
    turn_events,
)
from nahida_workers.core.messages import ProviderTurn, ToolCall
from nahida_workers.core.receipts import missing_receipts
from nahida_workers.core.records import InboxLimits, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.core.sealing import closing_events, closing_receipts
from nahida_workers.core.state import RunState
from nahida_workers.errors import LedgerError, StaleEpochError
from nahida_workers.ledger.control import control_ledger
from nahida_workers.ports import (
    ChildLedger,
    Clock,
    Fence,
    LedgerInbox,
    LedgerOutbox,
    LedgerOwners,
    LedgerReader,
    LedgerWriter,
    TxT,
)
from nahida_workers.runtime.children.close import (
    close_children,
    post_completion,
    unfinished_children,
)
from nahida_workers.runtime.children.resume import reopen
from nahida_workers.runtime.children.spawn import Spawner, completion_message, wake_outbox
from nahida_workers.runtime.children.worktree import finish, prepare
from nahida_workers.runtime.commits.outage import commit_through_outage
from nahida_workers.runtime.commits.pause_points import pause_point
from nahida_workers.runtime.fanout.calls import Execution
from nahida_workers.runtime.observe.observer import Observer
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.workspaces import WorktreeManager
from nahida_workers.workspaces.model import Worktree

__all__ = ["CommitLedger", "CommitPoints", "Family", "hand_back", "take_over"]

log = logging.getLogger(__name__)


class CommitLedger(
    LedgerWriter[TxT], LedgerInbox[TxT], LedgerOutbox[TxT], LedgerReader, Protocol[TxT]
):
    """The ledger ports a session's commit points use (DESIGN.md section 3)."""


def take_over(ledger: LedgerOwners, session_id: str, *, at: datetime) -> int:
    """Become the session's owner: bump its fencing epoch (DESIGN.md section 4).

    The same commit settles the durable crash counter of the previous owner
    (``LedgerOwners.bump_epoch``).  Returns the new epoch.

    Raises:
        NotFoundError: unknown session.
    """
    return ledger.bump_epoch(session_id, at=at)


def hand_back(ledger: LedgerOwners, session_id: str, epoch: int, *, at: datetime) -> None:
    """Hand the session back cleanly: owner ``epoch`` did not crash (``close_owner``).

    A ledger outage here is logged, not raised: the next owner then counts
    one crash too many, which is the safe side.
    """
    try:
        ledger.close_owner(session_id, epoch, at=at)
    except Exception as exc:
        log.warning("session %s: close_owner failed: %s", session_id, exc)


@dataclass
class Family:
    """What an owner's commit points need for child sessions (section 8).

    Attributes:
        children: the ledger's child port.
        spawner: writes the children of this session's Task calls.
        parent_id: this session's parent (its seal posts a completion there).
        publish: publishes an outbox row after its commit (the dispatcher's
            path; an unpublished row is re-published by the sweeper).
        inbox_limits: the parent inbox's bounds a background child's
            completion is posted under (``runtime/children/close.py``).
        cancel_children: after a seal that closed children (their cancel
            flagged in the seal's transaction), cancels them at once as
            ledger facts (``runtime/control/cancel.py``): a queued or parked
            child is sealed without waiting for a worker slot.
    """

    children: ChildLedger[Any]
    spawner: Spawner
    parent_id: str | None = None
    publish: Callable[[OutboxRecord], None] | None = None
    inbox_limits: InboxLimits = field(default_factory=InboxLimits)
    cancel_children: Callable[[Sequence[OutboxRecord]], None] | None = None

    def prepare_worktrees(self) -> None:
        """Create the worktrees of the worktree children the last spawn created."""
        manager = self.spawner.worktrees
        if manager is None:
            return
        for child, base in self.spawner.isolated:
            prepare(manager, self.spawner.session.workspace, child, base)
        self.spawner.isolated = []

    def running(self) -> list[str]:
        """This session's children that have not ended (read from the ledger)."""
        return unfinished_children(self.children, self.spawner.session.session_id)

    def publish_all(self, records: Sequence[OutboxRecord]) -> None:
        """Publish each row; a broker error leaves it to the sweeper."""
        for record in records:
            if self.publish is None:
                return
            try:
                self.publish(record)
            except Exception as exc:
                log.warning("outbox %s not published (the sweeper will): %s", record.outbox_id, exc)


class CommitPoints:
    """Fenced commits of one owned session; the run state learns only what committed.

    Args:
        ledger / clock: the ports.
        fence: the session id and the epoch this owner bumped (section 4).
        heartbeat: the lease heartbeat; checked before every commit attempt.
        outage_s: how long a commit is retried through a ledger outage, seconds.
        seal_outage_s: how long the seal ``failed/tool_persistence_failed`` is
            retried after tool results could not be stored, seconds.
        cancel_seen: whether the session's cancel flag was set when it was read.

    Attributes:
        cancel_seen / inbox_pending: the cancel flag and the count of waiting
            next-turn inbox messages, as the last commit read them under the
            fence's row lock (free and fresh at every commit point).
        observer: told what committed (set once the run is driven).
        worktree: this session's own worktree (``isolation: worktree``, a
            child's or a top-level session's) and the manager that made it;
            finished before the seal (``runtime/children/worktree.py``).
    """

    def __init__(
        self,
        ledger: CommitLedger[Any],
        clock: Clock,
        fence: Fence,
        heartbeat: Heartbeat,
        *,
        outage_s: float,
        seal_outage_s: float,
        cancel_seen: bool,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.fence = fence
        self.heartbeat = heartbeat
        self.outage_s = outage_s
        self.seal_outage_s = seal_outage_s
        self.observer: Observer | None = None
        self.cancel_seen = cancel_seen
        self.inbox_pending = 0
        self.family: Family | None = None
        self.worktree: tuple[WorktreeManager, Worktree] | None = None

    def finish_worktree(self, summary: str) -> dict[str, Any]:
        """Commit this session's worktree changes on its branch (before its seal); {} if none."""
        if self.worktree is None:
            return {}
        manager, tree = self.worktree
        return finish(manager, tree, summary)

    # -- runs ----------------------------------------------------------------------
    def open_run(self, run: RunRecord, events: Sequence[Event], claims: Sequence[str]) -> None:
        """A new run from inbox input: run row, its user input, claims, status running."""
        now = run.started_at
        with self.ledger.transaction(fence=self.fence) as tx:
            self.ledger.create_run(tx, run)
            self.ledger.append(tx, events)
            self.ledger.claim_inbox(tx, run.run_id, claims, at=now)
            self.ledger.set_session_status(tx, self.fence.session_id, SessionStatus.RUNNING, at=now)

    def close_session(self) -> None:
        """No run is left open and no input waits: ``sessions.status = done``."""
        with self.ledger.transaction(fence=self.fence) as tx:
            self.ledger.set_session_status(
                tx, self.fence.session_id, SessionStatus.DONE, at=self.clock.now()
            )

    # -- section 3 -------------------------------------------------------------------
    def commit_recovery(self, state: RunState, events: Sequence[Event]) -> None:
        """Close what a previous owner left open (``core/recovery.py``), if anything."""
        if events:
            self._commit(state, events)

    def commit_turn(self, state: RunState, turn: ProviderTurn) -> None:
        """Section 3 step 3: the turn's output and every tool call, in provider order.

        Each Task call's child session is written in the same transaction
        (section 8: a stable identity before dispatch), then published.
        """
        now = self.clock.now()
        events = turn_events(state, turn, now=now)
        family, outboxes = self.family, list[OutboxRecord]()
        also: Callable[[Any], None] | None = None
        if family is not None and any(
            e.type is EventType.TOOL_CALL and e.payload.get("name") == TASK_TOOL for e in events
        ):

            def also(tx: Any) -> None:
                outboxes[:] = family.spawner.spawn(tx, state.run_id, events, now)

        self._commit(state, events, also=also)
        if family is not None:
            family.prepare_worktrees()  # the launcher makes them before dispatch (B22)
            family.publish_all(outboxes)
        if also is not None:
            pause_point("commit_turn")  # test-only, inert by default: a crash test kills here

    def commit_results(
        self,
        state: RunState,
        run: RunRecord,
        executions: Sequence[Execution],
        *,
        claims: Sequence[str] = (),
    ) -> bool:
        """Section 3 step 5: every result of a batch with its receipt, in provider order.

        If the ledger refuses or stays unavailable, the side effects may have
        happened and only this owner knows the tools ran: it keeps its lease
        and seals the run ``failed/tool_persistence_failed``, retrying the seal
        through an outage of up to ``seal_outage_s`` -- so a later owner does
        not close the calls as interrupted and carry on as if nothing had
        been lost.

        ``claims``: inbox messages this commit acknowledges with the run (the
        completions of the children whose outcomes it adopts, section 8).

        Returns:
            True when the results committed; False when the run was sealed.

        Raises:
            LeaseLostError / StaleEpochError: this owner lost the session.
            LedgerUnavailableError: even the seal outlasted its outage window.
        """
        events = result_events(state, [e.result for e in executions], now=self.clock.now())
        try:
            self._commit(state, events, [e.receipt for e in executions], claims=claims)
        except LedgerError as exc:
            if isinstance(exc, StaleEpochError):
                raise  # fenced out: not a persistence failure, this owner just stops
            log.error("run %s: tool results not persisted: %s", run.run_id, exc)
            self.seal_failed(
                state,
                run,
                ReasonCode.TOOL_PERSISTENCE_FAILED,
                FailureCode.TOOL_PERSISTENCE_FAILED,
                within_s=max(self.seal_outage_s, self.outage_s),
            )
            return False
        return True

    def commit_control(
        self, state: RunState, events: Sequence[Event], *, claims: Sequence[str] = ()
    ) -> None:
        """Control events and the input they inject; ``claims``: inbox ids committed as input."""
        self._commit(state, events, claims=claims)

    def start_verifier(
        self,
        state: RunState,
        events: Sequence[Event],
        rows: tuple[SessionRecord, ChildLink, RunRecord, Event, OutboxRecord],
    ) -> None:
        """Section 6: ``verifier_started`` and the verifier child's rows, one transaction.

        The child is written idempotently by its derived id (a replay writes
        nothing new); a child limit that refuses it writes no row, which the
        verdict then reads as a FAIL.  Its outbox row is published after commit.

        Raises:
            LedgerError: no child-session port; or the ledger refused the write.
            LeaseLostError / StaleEpochError: this owner lost the session.
        """
        family = self._family()
        outboxes: list[OutboxRecord] = []

        def also(tx: Any) -> None:
            outbox = family.spawner.spawn_rows(tx, rows)
            outboxes[:] = [outbox] if outbox is not None else []

        self._commit(state, events, also=also)
        family.publish_all(outboxes)
        pause_point("start_verifier")  # test-only, inert by default: a crash test kills here

    def commit_handover(self, state: RunState, reason: HandoverReason) -> None:
        """Section 8 (shutdown): this owner stops at a boundary; the next one goes on.

        One fenced ``handover`` control event naming the calls committed and
        never started (``core/handover.py``): the next owner starts them as new.

        Raises:
            LeaseLostError / StaleEpochError: this owner lost the session meanwhile.
        """
        event = handover_event(state, reason, epoch=self.fence.epoch, now=self.clock.now())
        self._commit(state, [event])

    def record_loss(self, state: RunState, reason: str) -> bool:
        """Section 4: put on record that this owner stopped because its lease was lost.

        One attempt, fenced, without the heartbeat check (the loss is what it
        records): it lands only while the epoch is still this owner's -- no
        later owner has taken over yet -- and a refusal or an outage is
        logged, not raised: the owner stops either way.  Returns True when it
        landed.
        """
        event = lease_event(
            state, "lost", reason or "unknown", epoch=self.fence.epoch, now=self.clock.now()
        )
        try:
            with self.ledger.transaction(fence=self.fence, run_id=state.run_id) as tx:
                self.ledger.append(tx, [event])
        except Exception as exc:  # fenced out or unreachable: the next owner's recovery speaks
            log.info("run %s: the lost lease is not on record (%s)", state.run_id, exc)
            return False
        self._learn(state, [event], ())
        return True

    def seal(
        self, state: RunState, run: RunRecord, finish: Finish, *, within_s: float | None = None
    ) -> None:
        """Terminal event + run row + inbox acknowledgement + session status, one transaction.

        ``within_s``: how long to ride out a ledger outage (default ``outage_s``).

        Raises:
            LedgerUnavailableError: the outage outlasted ``within_s``.
        """
        now = self.clock.now()
        # Every call still open is closed in this transaction, before the
        # terminal event (core/sealing.py): its result and receipt stay in its run.
        closing = closing_events(state, finish.state, finish.reason, now=now)
        receipts = closing_receipts(state, closing, now=now)
        family = self.family
        parent = family.parent_id if family is not None else None
        wake: list[OutboxRecord] = []
        closed: list[OutboxRecord] = []
        running = family.running() if family is not None else []
        event = self._terminal(state, finish, len(closing), running, now)

        def write() -> None:
            # A child's seal posts its completion (a parent's closes its children)
            # in the same transaction: no run_id hint, so the SQL ledger takes the
            # slow path with the lock.
            hint = None if parent or running else run.run_id
            with self.ledger.transaction(fence=self.fence, run_id=hint) as tx:
                self.ledger.seal_run(
                    tx,
                    event,
                    state=finish.state,
                    reason=finish.reason,
                    failure_code=finish.failure_code,
                    ended_at=now,
                    closing=closing,
                    receipts=receipts,
                )
                wake.clear()
                if parent is not None and family is not None:
                    wake.extend(self._post_completion(tx, family, parent, run, finish, now))
                closed.clear()
                if running:
                    closed.extend(close_children(self.ledger, tx, running, run.run_id, now))

        self._through_outage(
            write,
            [*closing, event],
            receipts,
            landed=lambda: self._landed(run.run_id, event),
            within_s=self.outage_s if within_s is None else within_s,
        )
        self._learn(state, closing, receipts)
        state.apply(event)
        log.info("run %s sealed: %s/%s", run.run_id, finish.state.value, finish.reason.value)
        if family is not None:
            family.publish_all(wake)
            self._cancel_closed(family, closed)
        if self.observer is not None:
            self.observer.sealed(state, finish)

    def _cancel_closed(self, family: Family, closed: Sequence[OutboxRecord]) -> None:
        """The children this seal closed, cancelled at once; else their flag and message stand."""
        if not closed:
            return
        if family.cancel_children is None:
            family.publish_all(closed)
            return
        try:
            family.cancel_children(closed)
        except Exception as exc:  # the flags and outbox rows committed: an owner will seal them
            log.warning("children of %s not cancelled at once: %s", self.fence.session_id, exc)
            family.publish_all(closed)

    def _learn(
        self, state: RunState, events: Sequence[Event], receipts: Sequence[ExecutionReceipt]
    ) -> None:
        """The state (and the observer) learn what just committed."""
        if events and self.observer is not None:
            self.observer.committed(events)
        for event in events:
            state.apply(event)
        for receipt in receipts:
            state.apply_receipt(receipt)

    def _terminal(
        self, state: RunState, finish: Finish, closed: int, running: list[str], now: datetime
    ) -> Event:
        """The terminal event, after ``closed`` closing results, with its evidence."""
        event = terminal_event(state, finish, now=now)
        event = event.model_copy(update={"sequence": event.sequence + closed})
        if self.worktree is not None:  # the commit is evidence (a parent's receipt, a result)
            done = self.finish_worktree(finish.final_text)
            event = event.model_copy(update={"payload": {**event.payload, **done}})
        if running:  # section 8: a parent that ends names the children it leaves running
            event = event.model_copy(
                update={"payload": {**event.payload, "children_running": running}}
            )
        return event

    def _post_completion(
        self, tx: Any, family: Family, parent: str, run: RunRecord, finish: Finish, now: datetime
    ) -> list[OutboxRecord]:
        """A child's completion into its parent's inbox; the wake-up row, if it woke it."""
        child = self.fence.session_id
        link = family.spawner.link()
        message = completion_message(
            parent,
            child,
            run.run_id,
            finish.state,
            finish.reason.value,
            now,
            description=str(link.lineage.get("description", "")),
            final_text=finish.final_text,
            # A team member's end is a fact that wakes a lead waiting for its
            # members, never input for its next turn (DESIGN.md section 8).
            background=link.lineage.get("mode") == "background"
            and "team_member" not in link.lineage,
        )
        outbox = wake_outbox(parent, child, run.run_id, now)
        woke = post_completion(
            self.ledger,
            family.children,
            tx,
            message,
            outbox,
            limits=family.inbox_limits,
            at=now,
            child=child,
        )
        return [outbox] if woke else []

    def park(
        self, state: RunState, run: RunRecord, park: Park, *, budget_s: float | None = None
    ) -> bool:
        """Section 8: wait for children -- or not, when every awaited one is already done.

        One fenced transaction holding the session row lock (the lock a
        child's completion post takes too, so no wake-up is lost): the
        ``parked`` control event, ``sessions.status = waiting``, the
        awaited child ids and, with ``budget_s``, the run's wall-clock
        budget as a durable timer (``core/facts.py``; beat fires it while
        the session waits, DESIGN.md section 8).  Returns True when the session parked; False
        (nothing written) when the children ended meanwhile (adopt them) or
        its cancel was requested (``cancel_seen`` is then set: seal it).
        """
        family = self.family
        if family is None:
            raise LedgerError("park needs the child-session port")
        now = self.clock.now()
        event = Event(
            run_id=run.run_id,
            sequence=state.next_sequence,
            type=EventType.CONTROL,
            payload={"kind": "parked", "awaiting": list(park.awaiting), "calls": list(park.calls)},
            created_at=now,
        )

        timer = None
        if budget_s is not None:
            me = self.fence.session_id
            root = family.spawner.link().root_id or me
            timer = budget_timer(
                me, root, run.run_id, started_at=run.started_at, budget_s=budget_s, now=now
            )

        def write() -> bool:
            with self.ledger.transaction(fence=self.fence) as tx:
                if not family.children.park(tx, self.fence.session_id, park.awaiting, at=now):
                    return False
                self.ledger.append(tx, [event])
                if timer is not None:
                    control_ledger(self.ledger).set_timer(tx, timer)
            return True

        self.heartbeat.check()
        parked = self._through_outage(
            write,
            [event],
            (),
            landed=lambda: self._landed(run.run_id, event),
            within_s=self.outage_s,
        )
        if parked is False:
            session = self.ledger.get_session(self.fence.session_id)
            self.cancel_seen = session is not None and session.cancel_requested_at is not None
            return False
        state.apply(event)
        if self.observer is not None:
            self.observer.committed([event])
        log.info("run %s parked awaiting %d child session(s)", run.run_id, len(park.awaiting))
        self._publish_unpublished(family, park.awaiting)
        return True

    def respawn_child(self, run_id: str, call: ToolCall) -> str | None:
        """Section 8: re-attempt a refused spawn of ``call``'s child, fenced (idempotent).

        The child limits are checked again; the outbox row of a child created
        now is published after commit.  Returns the refusal the model sees,
        or None when the child exists.

        Raises:
            LedgerError: no child-session port; or the ledger refused the write.
            LeaseLostError / StaleEpochError: this owner lost the session.
        """
        family = self._family()
        self.heartbeat.check()
        with self.ledger.transaction(fence=self.fence) as tx:
            outbox = family.spawner.spawn_one(tx, run_id, call, self.clock.now())
        family.publish_all([outbox] if outbox is not None else [])
        return family.spawner.refused.get(call.call_id)

    def reopen_child(self, child: str, key: str) -> None:
        """Section 8: re-queue a resumed ``child`` that is ``done`` with its prompt pending.

        The child's rows, not this session's: written without this owner's
        fence.  ``key`` makes the outbox id stable (``runtime/children/resume.py``).

        Raises:
            LedgerError: no child-session port; or the ledger refused the write.
        """
        family = self._family()
        with self.ledger.transaction() as tx:
            record = reopen(self.ledger, tx, child, key, self.clock.now())
        family.publish_all([record])

    def _family(self) -> Family:
        if self.family is None:
            raise LedgerError("child sessions need the child-session port")
        return self.family

    def _publish_unpublished(self, family: Family, children: Sequence[str]) -> None:
        """Publish the awaited children's outbox rows a crash left unpublished.

        An owner killed between committing its children and publishing them
        leaves their rows pending; the next owner parks on the same children,
        and without beat's sweeper nobody else would publish them.  Pending
        rows are normally none, so this is one cheap read per park.
        """
        awaited = set(children)
        family.publish_all([r for r in self.ledger.pending_outbox() if r.session_id in awaited])

    def seal_failed(
        self,
        state: RunState,
        run: RunRecord,
        reason: ReasonCode,
        code: FailureCode,
        *,
        within_s: float | None = None,
    ) -> None:
        """:meth:`seal` ``failed/<reason>`` with the runtime's own final text."""
        failed = TerminalState.FAILED
        finish = Finish(failed, reason, final_text_for(failed, reason), code)
        self.seal(state, run, finish, within_s=within_s)

    # -- the one transaction shape -----------------------------------------------------
    def _commit(
        self,
        state: RunState,
        events: Sequence[Event],
        receipts: Sequence[ExecutionReceipt] = (),
        *,
        claims: Sequence[str] = (),
        also: Callable[[Any], None] | None = None,
    ) -> None:
        """One fenced transaction; the state learns the events only after commit.

        ``also(tx)`` writes more rows in the same transaction (child sessions).

        A result without a receipt (a call recovery closed as interrupted, one
        refused by a bound) is committed with a synthetic one
        (``core/receipts.py``).

        Raises:
            LeaseLostError / StaleEpochError: this owner lost the session.
            LedgerIntegrityError: the ledger refused the write.
            LedgerUnavailableError: the outage outlasted ``outage_s``.
        """
        self.heartbeat.check()
        receipts = [
            *receipts,
            *missing_receipts(state, events, receipts, now=self.clock.now()),
        ]

        def write() -> Any:
            with self.ledger.transaction(fence=self.fence, run_id=state.run_id) as tx:
                self.ledger.append(tx, events, receipts)
                self.ledger.claim_inbox(tx, state.run_id, claims, at=self.clock.now())
                if also is not None:
                    also(tx)
            return tx

        tx = self._through_outage(
            write,
            events,
            receipts,
            landed=lambda: bool(events) and self._landed(state.run_id, events[0]),
            within_s=self.outage_s,
        )
        if tx is not None:
            # Both are read under the fence's row lock, so they are free and fresh.
            self.cancel_seen = tx.cancel_requested
            self.inbox_pending = tx.pending_inbox
        else:
            self.inbox_pending = max(self.inbox_pending, 1)  # unknown: look at the boundary
        self._learn(state, events, receipts)

    def _through_outage(
        self,
        write: Callable[[], Any],
        events: Sequence[Event],
        receipts: Sequence[ExecutionReceipt],
        *,
        landed: Callable[[], bool],
        within_s: float,
    ) -> Any:
        started = self.clock.monotonic()
        result = commit_through_outage(
            write,
            landed=landed,
            within_s=within_s,
            before_retry=self.heartbeat.check,
            clock=self.clock,
        )
        metrics.observe_commit(self.clock.monotonic() - started, events, receipts)
        return result

    def _landed(self, run_id: str, first: Event) -> bool:
        """Whether a commit beginning with ``first`` is in the ledger, written by us.

        A commit point is one transaction, so its first event stands for all
        of it; the epoch tells our write from anyone else's.
        """
        return any(
            e.sequence == first.sequence
            and e.type is first.type
            and e.call_id == first.call_id
            and e.epoch == self.fence.epoch
            for e in self.ledger.events(run_id)
        )
