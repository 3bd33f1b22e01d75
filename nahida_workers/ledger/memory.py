"""The in-memory ledger twin: same rules, same refusals, no database.

Transactions are serialised by one lock (the twin of a row lock) and keep an
undo journal, so a refused or failed write leaves nothing behind -- the same
all-or-nothing behaviour the SQL ledger gets from the database.  The contract
suite (``tests/contract/test_ledger_contract.py``) runs against both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from nahida_workers.core.events import (
    Event,
    EventType,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import (
    BatchRecord,
    InboxLimits,
    InboxMessage,
    InboxStatus,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.errors import (
    EventAfterTerminalError,
    LedgerIntegrityError,
    NotFoundError,
    StaleEpochError,
)
from nahida_workers.ledger.memory_owners import MemoryOwnerOps
from nahida_workers.ledger.rules import (
    RunFacts,
    cap_payload,
    check_append,
    check_inbox,
    check_receipts,
    storable,
    storable_events,
    storable_receipts,
)
from nahida_workers.ports import Fence

__all__ = ["MemoryLedger", "MemoryTx"]


class MemoryTx:
    """An open in-memory transaction: its fence and its undo journal."""

    def __init__(self) -> None:
        self.fence: Fence | None = None
        self.cancel_requested = False
        self.pending_inbox = 0
        self.undo: list[Callable[[], None]] = []


class MemoryLedger(MemoryOwnerOps):
    """Dict-backed ledger (see :class:`nahida_workers.ports.Ledger`).

    Args:
        payload_max_bytes: cap on one event payload's JSON size, in bytes.

    Test hooks: ``commit_hook`` runs just before a transaction commits (if
    it raises, the transaction rolls back); ``ack_hook`` runs just after it
    committed (if it raises, the writer sees an error although the commit
    landed -- a lost acknowledgement).
    """

    def __init__(self, *, payload_max_bytes: int = 256 * 1024) -> None:
        self.payload_max_bytes = payload_max_bytes
        self._lock = threading.RLock()
        self._batches: dict[str, BatchRecord] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._keys: dict[str, str] = {}
        self._runs: dict[str, RunRecord] = {}
        self._events: dict[str, list[Event]] = {}
        self._receipts: dict[str, list[ExecutionReceipt]] = {}
        self._outbox: dict[str, OutboxRecord] = {}
        self._inbox: dict[str, InboxMessage] = {}
        self._fleet: dict[str, str] = {}
        self._artifacts: dict[str, bytes] = {}
        self.commit_hook: Callable[[], None] | None = None
        self.ack_hook: Callable[[], None] | None = None

    # -- transactions ----------------------------------------------------------
    @contextmanager
    def transaction(
        self, *, fence: Fence | None = None, run_id: str | None = None
    ) -> Iterator[MemoryTx]:
        """Open a transaction; with ``fence`` check it first (``run_id`` is a hint).

        ``commit_hook`` (tests) runs just before commit; if it raises, the
        transaction rolls back and the error propagates.
        """
        with self._lock:
            tx = MemoryTx()
            try:
                if fence is not None:
                    self.lock_session(tx, fence.session_id, fence.epoch)
                yield tx
                if self.commit_hook is not None:
                    self.commit_hook()
            except BaseException:
                for undo in reversed(tx.undo):
                    undo()
                raise
        if self.ack_hook is not None:
            self.ack_hook()

    def lock_session(self, tx: MemoryTx, session_id: str, epoch: int) -> None:
        """Check that ``epoch`` is the session's current epoch (the lock is global)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        if session.lease_epoch != epoch:
            raise StaleEpochError(
                f"session {session_id}: writer epoch {epoch} is stale "
                f"(current {session.lease_epoch})"
            )
        tx.fence = Fence(session_id, epoch)
        tx.cancel_requested = session.cancel_requested_at is not None
        tx.pending_inbox = sum(
            1
            for m in self._inbox.values()
            if m.session_id == session_id and m.status is InboxStatus.PENDING and m.next_turn
        )

    def _require_fence(self, tx: MemoryTx, run_id: str) -> Fence:
        if tx.fence is None:
            raise LedgerIntegrityError("event and receipt writes need a fenced transaction")
        run = self._runs.get(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id}")
        if run.session_id != tx.fence.session_id:
            raise LedgerIntegrityError(f"run {run_id} does not belong to the fenced session")
        return tx.fence

    def _facts(self, run_id: str) -> RunFacts:
        events = self._events.get(run_id, [])
        facts = RunFacts(max_sequence=events[-1].sequence if events else 0)
        for e in events:
            if e.type is EventType.TERMINAL:
                facts.has_terminal = True
            elif e.type is EventType.TOOL_CALL:
                facts.calls.add(e.call_id or "")
            elif e.type is EventType.TOOL_RESULT:
                facts.results.add(e.call_id or "")
        facts.receipts = {r.call_id for r in self._receipts.get(run_id, [])}
        return facts

    def _put(self, tx: MemoryTx, table: dict[str, object], key: str, value: object) -> None:
        had, old = key in table, table.get(key)

        def undo() -> None:
            if had:
                table[key] = old
            else:
                table.pop(key, None)

        table[key] = value
        tx.undo.append(undo)

    # -- writes ------------------------------------------------------------------
    def create_batch(self, tx: MemoryTx, batch: BatchRecord) -> None:
        """Insert a batch row."""
        batch = storable(batch)
        if batch.batch_id in self._batches:
            raise LedgerIntegrityError(f"batch {batch.batch_id} exists")
        self._put(tx, self._batches, batch.batch_id, batch)  # type: ignore[arg-type]

    def create_session(self, tx: MemoryTx, session: SessionRecord) -> tuple[SessionRecord, bool]:
        """Insert a session, or return the one holding its idempotency key."""
        session = storable(session)
        key = session.idempotency_key
        if key is not None and key in self._keys:
            return self._sessions[self._keys[key]], False
        if session.session_id in self._sessions:
            raise LedgerIntegrityError(f"session {session.session_id} exists")
        self._put(tx, self._sessions, session.session_id, session)  # type: ignore[arg-type]
        if key is not None:
            self._put(tx, self._keys, key, session.session_id)  # type: ignore[arg-type]
        if tx.fence is None:  # the creating transaction holds the epoch-0 fence
            tx.fence = Fence(session.session_id, session.lease_epoch)
        return session, True

    def open_session(
        self,
        session: SessionRecord,
        run: RunRecord,
        events: Sequence[Event],
        outbox: OutboxRecord,
    ) -> tuple[SessionRecord, bool]:
        """A new session with its first run, events and outbox row, or the existing one.

        Its own commit (the dispatcher's one write).
        """
        with self.transaction() as tx:
            stored, created = self.create_session(tx, session)
            if created:
                self.create_run(tx, run)
                self.append(tx, events)
                self.add_outbox(tx, outbox)
        return stored, created

    def create_run(self, tx: MemoryTx, run: RunRecord) -> None:
        """Insert a run row."""
        run = storable(run)
        if run.session_id not in self._sessions:
            raise LedgerIntegrityError(f"run {run.run_id}: no session {run.session_id}")
        if run.run_id in self._runs:
            raise LedgerIntegrityError(f"run {run.run_id} exists")
        self._put(tx, self._runs, run.run_id, run)  # type: ignore[arg-type]

    def append(
        self, tx: MemoryTx, events: Sequence[Event], receipts: Sequence[ExecutionReceipt] = ()
    ) -> None:
        """Events, then their receipts, as one write (a commit point)."""
        self._append_events(tx, events)
        self._put_receipts(tx, receipts)

    def _append_events(self, tx: MemoryTx, events: Sequence[Event]) -> None:
        """Append events under the transaction's fence (rules in ``rules.py``)."""
        if not events:
            return
        events = storable_events(events)
        run_id = events[0].run_id
        fence = self._require_fence(tx, run_id)
        check_append(self._facts(run_id), events)
        log = self._events.setdefault(run_id, [])
        start = len(log)
        log.extend(
            e.model_copy(
                update={
                    "epoch": fence.epoch,
                    "payload": cap_payload(e.payload, self.payload_max_bytes),
                }
            )
            for e in events
        )
        tx.undo.append(lambda: log.__delitem__(slice(start, None)))

    def _put_receipts(self, tx: MemoryTx, receipts: Sequence[ExecutionReceipt]) -> None:
        """Store receipts; each needs a committed tool_call and no prior receipt."""
        if not receipts:
            return
        receipts = storable_receipts(receipts)
        run_id = receipts[0].run_id
        if any(r.run_id != run_id for r in receipts):
            raise LedgerIntegrityError("one append must hold receipts of one run")
        fence = self._require_fence(tx, run_id)
        check_receipts(self._facts(run_id), receipts)
        log = self._receipts.setdefault(run_id, [])
        start = len(log)
        log.extend(
            r.model_copy(
                update={
                    "epoch": fence.epoch,
                    "evidence": cap_payload(dict(r.evidence), self.payload_max_bytes),
                }
            )
            for r in receipts
        )
        tx.undo.append(lambda: log.__delitem__(slice(start, None)))

    def finish_run(
        self,
        tx: MemoryTx,
        run_id: str,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
    ) -> None:
        """Record the terminal state on the run row, exactly once."""
        self._require_fence(tx, run_id)
        run = self._runs[run_id]
        if run.terminal_state is not None:
            raise EventAfterTerminalError(f"run {run_id} already has a terminal state")
        updated = run.model_copy(
            update={
                "terminal_state": state,
                "terminal_reason": reason,
                "failure_code": failure_code,
                "ended_at": ended_at,
            }
        )
        self._put(tx, self._runs, run_id, updated)  # type: ignore[arg-type]

    def _update_session(self, tx: MemoryTx, session_id: str, **changes: object) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        self._put(tx, self._sessions, session_id, session.model_copy(update=changes))  # type: ignore[arg-type]

    def seal_run(
        self,
        tx: MemoryTx,
        event: Event,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
    ) -> None:
        """Terminal event + run row + inbox acknowledgement + session ``done``, cancel consumed."""
        self._append_events(tx, [event])
        self.finish_run(
            tx,
            event.run_id,
            state=state,
            reason=reason,
            failure_code=failure_code,
            ended_at=ended_at,
        )
        self.acknowledge_inbox(tx, event.run_id, at=ended_at)
        session_id = self._runs[event.run_id].session_id
        self._update_session(
            tx,
            session_id,
            status=SessionStatus.DONE,
            cancel_requested_at=None,
            updated_at=ended_at,
        )

    def set_session_status(
        self, tx: MemoryTx, session_id: str, status: SessionStatus, *, at: datetime
    ) -> None:
        """Set the session status."""
        self._update_session(tx, session_id, status=status, updated_at=at)

    def request_cancel(self, tx: MemoryTx, session_id: str, *, at: datetime) -> None:
        """Set the cancel flag (the first request's time is kept)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        self._update_session(
            tx, session_id, cancel_requested_at=session.cancel_requested_at or at, updated_at=at
        )

    def add_outbox(self, tx: MemoryTx, record: OutboxRecord) -> None:
        """Record a publish owed to the broker."""
        self._put(tx, self._outbox, record.outbox_id, record)  # type: ignore[arg-type]

    def mark_published(self, outbox_id: str, *, at: datetime) -> None:
        """Mark an outbox row published and count the attempt (its own commit)."""
        with self.transaction() as tx:
            record = self._outbox[outbox_id]
            self._put(
                tx,
                self._outbox,  # type: ignore[arg-type]
                outbox_id,
                record.model_copy(update={"published_at": at, "attempts": record.attempts + 1}),
            )

    def bump_epoch(self, session_id: str, *, at: datetime) -> int:
        """Increment the fencing epoch; status → running; settle the crash counter.

        The previous owner, if still open, counts as a crashed delivery unless
        it made progress (``ledger/sql_owners.py``); the new owner is open.
        """
        with self.transaction() as tx:
            session = self._sessions.get(session_id)
            if session is None:
                raise NotFoundError(f"no session {session_id}")
            epoch = session.lease_epoch + 1
            streak = session.crash_streak
            if session.open_epoch is not None:
                gone = self._progressed(session_id, session.open_epoch)
                streak = 0 if gone else streak + 1
            self._update_session(
                tx,
                session_id,
                lease_epoch=epoch,
                status=SessionStatus.RUNNING,
                updated_at=at,
                open_epoch=epoch,
                crash_streak=streak,
            )
        return epoch

    def swap_fleet_value(self, key: str, value: str, *, at: datetime) -> str | None:
        """Store ``value`` under ``key``; return the value it replaced (None if new)."""
        with self._lock:
            old = self._fleet.get(key)
            self._fleet[key] = value
            return old

    # -- inbox -------------------------------------------------------------------
    def enqueue_inbox(
        self, tx: MemoryTx, message: InboxMessage, limits: InboxLimits
    ) -> tuple[InboxMessage, bool]:
        """Add a pending message, or return the one already holding its id."""
        message = storable(message)
        if message.session_id not in self._sessions:
            raise NotFoundError(f"no session {message.session_id}")
        existing = self._inbox.get(message.message_id)
        if existing is not None:
            return existing, False
        pending = [
            (m.kind.value, m.size_bytes)
            for m in self._inbox.values()
            if m.session_id == message.session_id and m.status is InboxStatus.PENDING
        ]
        check_inbox(pending, message.kind.value, message.size_bytes, limits)
        self._put(tx, self._inbox, message.message_id, message)  # type: ignore[arg-type]
        return message, True

    def claim_inbox(
        self, tx: MemoryTx, run_id: str, message_ids: Sequence[str], *, at: datetime
    ) -> None:
        """Mark pending messages of the fenced session claimed by ``run_id``."""
        if not message_ids:
            return
        fence = self._require_fence(tx, run_id)
        for message_id in set(message_ids):
            message = self._inbox.get(message_id)
            if (
                message is None
                or message.session_id != fence.session_id
                or message.status is not InboxStatus.PENDING
            ):
                raise LedgerIntegrityError("inbox messages are not pending for this session")
            claimed = message.model_copy(
                update={"status": InboxStatus.CLAIMED, "claimed_at": at, "claimed_run_id": run_id}
            )
            self._put(tx, self._inbox, message_id, claimed)  # type: ignore[arg-type]

    def acknowledge_inbox(self, tx: MemoryTx, run_id: str, *, at: datetime) -> int:
        """Acknowledge every message ``run_id`` claimed; returns how many."""
        self._require_fence(tx, run_id)
        done = 0
        for message_id, message in list(self._inbox.items()):
            if message.claimed_run_id == run_id and message.status is InboxStatus.CLAIMED:
                acked = message.model_copy(
                    update={"status": InboxStatus.ACKNOWLEDGED, "acknowledged_at": at}
                )
                self._put(tx, self._inbox, message_id, acked)  # type: ignore[arg-type]
                done += 1
        return done

    def inbox(
        self, session_id: str, *, statuses: Sequence[InboxStatus] | None = None
    ) -> list[InboxMessage]:
        """A session's inbox messages, oldest first."""
        with self._lock:
            found = [
                m
                for m in self._inbox.values()
                if m.session_id == session_id and (statuses is None or m.status in statuses)
            ]
        return sorted(found, key=lambda m: (m.created_at, m.message_id))

    # -- reads -------------------------------------------------------------------
    def load_run(self, fence: Fence, run_id: str) -> tuple[list[Event], list[ExecutionReceipt]]:
        """A new owner's read of its run: every event and receipt."""
        return self.events(run_id), self.receipts(run_id)

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session or None."""
        with self._lock:
            return self._sessions.get(session_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run or None."""
        with self._lock:
            return self._runs.get(run_id)

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        with self._lock:
            runs = [r for r in self._runs.values() if r.session_id == session_id]
        return sorted(runs, key=lambda r: (r.started_at, r.run_id))

    def events(self, run_id: str) -> list[Event]:
        """Events of a run by sequence."""
        with self._lock:
            return list(self._events.get(run_id, []))

    def receipts(self, run_id: str) -> list[ExecutionReceipt]:
        """Receipts in write order."""
        with self._lock:
            return list(self._receipts.get(run_id, []))

    def sessions(
        self, *, batch_id: str | None = None, statuses: Sequence[SessionStatus] | None = None
    ) -> list[SessionRecord]:
        """Sessions, optionally by batch and status, oldest first."""
        with self._lock:
            found = [
                s
                for s in self._sessions.values()
                if (batch_id is None or s.batch_id == batch_id)
                and (statuses is None or s.status in statuses)
            ]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))

    def quiet_sessions(self, *, older_than: datetime) -> list[str]:
        """Unfinished sessions whose open run has written nothing since ``older_than``."""
        with self._lock:
            quiet = []
            for session in self._sessions.values():
                if session.status not in (SessionStatus.QUEUED, SessionStatus.RUNNING):
                    continue
                for run in self._runs.values():
                    if run.session_id != session.session_id or run.terminal_state is not None:
                        continue
                    events = self._events.get(run.run_id, [])
                    if run.started_at < older_than and not any(
                        e.created_at is not None and e.created_at >= older_than for e in events
                    ):
                        quiet.append(session.session_id)
            return sorted(set(quiet))

    def batches(self) -> list[BatchRecord]:
        """All batches, newest first."""
        with self._lock:
            return sorted(self._batches.values(), key=lambda b: b.created_at, reverse=True)

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch or None."""
        with self._lock:
            return self._batches.get(batch_id)

    def pending_outbox(self, *, limit: int = 100) -> list[OutboxRecord]:
        """Unpublished outbox rows, oldest first."""
        with self._lock:
            rows = [r for r in self._outbox.values() if r.published_at is None]
        return sorted(rows, key=lambda r: r.created_at)[:limit]
