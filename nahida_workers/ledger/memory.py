"""The in-memory ledger twin: same rules, same refusals, no database.

Transactions are serialised by one lock (the twin of a row lock) and keep an
undo journal, so a refused or failed write leaves nothing behind -- the same
all-or-nothing behaviour the SQL ledger gets from the database.  The contract
suite (``tests/contract/test_ledger_contract.py``) runs against both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from nahida_workers.core.event_payloads import PayloadModel, payload_json, trusted_payload
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
from nahida_workers.ledger.memory_owners import MemoryOwners
from nahida_workers.ledger.memory_parts import MemoryInbox, MemoryReads, MemoryTables, MemoryTx
from nahida_workers.ledger.parts import forward
from nahida_workers.ledger.rules import (
    RunFacts,
    cap_payload,
    check_append,
    check_receipts,
    storable,
    storable_events,
    storable_receipts,
)
from nahida_workers.ports import Fence

__all__ = ["MemoryLedger", "MemoryTx"]


#: How many rows of a list a cache counted, and the last of them.
_Mark = tuple[int, object]


def _mark(rows: Sequence[object]) -> _Mark:
    return len(rows), rows[-1] if rows else None


def _still(rows: Sequence[object], mark: _Mark) -> bool:
    """The first ``mark[0]`` rows are the ones counted (append-only, or truncated since)."""
    n, last = mark
    return n <= len(rows) and (n == 0 or rows[n - 1] is last)


class MemoryLedger:
    """Dict-backed ledger (see :class:`nahida_workers.ports.Ledger`).

    The core (transactions, fencing, row and event writes, the seal) built
    from parts it holds, like the SQL ledger: ``tables``
    (:class:`~.memory_parts.MemoryTables`), ``reads``, ``inbox_part`` and
    ``owners``; their methods are forwarded.

    Args:
        payload_max_bytes: cap on one event payload's JSON size, in bytes.

    Test hooks: ``commit_hook`` runs just before a transaction commits (if
    it raises, the transaction rolls back); ``ack_hook`` runs just after it
    committed (if it raises, the writer sees an error although the commit
    landed -- a lost acknowledgement).
    """

    def __init__(self, *, payload_max_bytes: int = 256 * 1024) -> None:
        self.payload_max_bytes = payload_max_bytes
        self.tables = MemoryTables()
        self._t = self.tables
        self.reads = MemoryReads(self.tables)
        self.inbox_part = MemoryInbox(self.tables, self._require_fence)
        self.owners = MemoryOwners(self.tables)
        self.commit_hook: Callable[[], None] | None = None
        self._fact_cache: dict[str, tuple[_Mark, _Mark, RunFacts]] = {}
        self.ack_hook: Callable[[], None] | None = None

    # -- the parts' methods ------------------------------------------------------
    enqueue_inbox = forward("inbox_part", MemoryInbox.enqueue_inbox)
    claim_inbox = forward("inbox_part", MemoryInbox.claim_inbox)
    acknowledge_inbox = forward("inbox_part", MemoryInbox.acknowledge_inbox)
    inbox = forward("inbox_part", MemoryInbox.inbox)
    close_owner = forward("owners", MemoryOwners.close_owner)
    put_artifact = forward("owners", MemoryOwners.put_artifact)
    get_artifact = forward("owners", MemoryOwners.get_artifact)
    load_run = forward("reads", MemoryReads.load_run)
    get_session = forward("reads", MemoryReads.get_session)
    get_run = forward("reads", MemoryReads.get_run)
    runs_of = forward("reads", MemoryReads.runs_of)
    events = forward("reads", MemoryReads.events)
    receipts = forward("reads", MemoryReads.receipts)
    sessions = forward("reads", MemoryReads.sessions)
    session_counts = forward("reads", MemoryReads.session_counts)
    quiet_sessions = forward("reads", MemoryReads.quiet_sessions)
    batches = forward("reads", MemoryReads.batches)
    get_batch = forward("reads", MemoryReads.get_batch)
    pending_outbox = forward("reads", MemoryReads.pending_outbox)

    # -- transactions ----------------------------------------------------------
    @contextmanager
    def transaction(
        self, *, fence: Fence | None = None, run_id: str | None = None
    ) -> Iterator[MemoryTx]:
        """Open a transaction; with ``fence`` check it first (``run_id`` is a hint).

        ``commit_hook`` (tests) runs just before commit; if it raises, the
        transaction rolls back and the error propagates.
        """
        with self._t.lock:
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
        session = self._t.sessions.get(session_id)
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
            for m in self._t.inbox.values()
            if m.session_id == session_id and m.status is InboxStatus.PENDING and m.next_turn
        )

    def _require_fence(self, tx: MemoryTx, run_id: str) -> Fence:
        if tx.fence is None:
            raise LedgerIntegrityError("event and receipt writes need a fenced transaction")
        run = self._t.runs.get(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id}")
        if run.session_id != tx.fence.session_id:
            raise LedgerIntegrityError(f"run {run_id} does not belong to the fenced session")
        return tx.fence

    def _facts(self, run_id: str) -> RunFacts:
        """The run's facts, folded from the rows added since the last call (a copy).

        The cache is trusted only while the rows it counted are still there
        (a rolled-back write truncates the lists; the object at the counted
        position then differs), else the facts are folded from scratch.
        """
        events = self._t.events.get(run_id, [])
        receipts = self._t.receipts.get(run_id, [])
        cached = self._fact_cache.get(run_id)
        if cached is None or not _still(events, cached[0]) or not _still(receipts, cached[1]):
            cached = ((0, None), (0, None), RunFacts())
        (n_events, _), (n_receipts, _), facts = cached
        for e in events[n_events:]:
            if e.type is EventType.TERMINAL:
                facts.has_terminal = True
            elif e.type is EventType.TOOL_CALL:
                facts.calls.add(e.call_id or "")
            elif e.type is EventType.TOOL_RESULT:
                facts.results.add(e.call_id or "")
        facts.receipts.update(r.call_id for r in receipts[n_receipts:])
        facts.max_sequence = events[-1].sequence if events else 0
        self._fact_cache[run_id] = (_mark(events), _mark(receipts), facts)
        return facts.copy()

    # -- writes ------------------------------------------------------------------
    def create_batch(self, tx: MemoryTx, batch: BatchRecord) -> None:
        """Insert a batch row."""
        batch = storable(batch)
        if batch.batch_id in self._t.batches:
            raise LedgerIntegrityError(f"batch {batch.batch_id} exists")
        self._t.put(tx, self._t.batches, batch.batch_id, batch)

    def create_session(self, tx: MemoryTx, session: SessionRecord) -> tuple[SessionRecord, bool]:
        """Insert a session, or return the one holding its idempotency key."""
        session = storable(session)
        key = session.idempotency_key
        if key is not None and key in self._t.keys:
            return self._t.sessions[self._t.keys[key]], False
        if session.session_id in self._t.sessions:
            raise LedgerIntegrityError(f"session {session.session_id} exists")
        self._t.put(tx, self._t.sessions, session.session_id, session)
        if key is not None:
            self._t.put(tx, self._t.keys, key, session.session_id)
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
        if run.session_id not in self._t.sessions:
            raise LedgerIntegrityError(f"run {run.run_id}: no session {run.session_id}")
        if run.run_id in self._t.runs:
            raise LedgerIntegrityError(f"run {run.run_id} exists")
        self._t.put(tx, self._t.runs, run.run_id, run)

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
        log = self._t.events.setdefault(run_id, [])
        start = len(log)
        log.extend(
            e.model_copy(update={"epoch": fence.epoch, "payload": self._stored_payload(e)})
            for e in events
        )
        tx.undo.append(lambda: log.__delitem__(slice(start, None)))

    def _stored_payload(self, event: Event) -> PayloadModel:
        """The payload as stored: a model (the twin keeps models, not JSON), capped."""
        capped = cap_payload(payload_json(event.payload), self.payload_max_bytes)
        return trusted_payload(event.type.value, capped)

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
        log = self._t.receipts.setdefault(run_id, [])
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
        run = self._t.runs[run_id]
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
        self._t.put(tx, self._t.runs, run_id, updated)

    def _update_session(self, tx: MemoryTx, session_id: str, **changes: object) -> None:
        session = self._t.sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        self._t.put(tx, self._t.sessions, session_id, session.model_copy(update=changes))

    def seal_run(
        self,
        tx: MemoryTx,
        event: Event,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
        closing: Sequence[Event] = (),
        receipts: Sequence[ExecutionReceipt] = (),
    ) -> None:
        """Closing results + receipts, terminal event, run row, inbox acks, session ``done``."""
        self._append_events(tx, closing)
        self._put_receipts(tx, receipts)
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
        session_id = self._t.runs[event.run_id].session_id
        self._update_session(
            tx,
            session_id,
            status=SessionStatus.DONE,
            cancel_requested_at=None,
            updated_at=ended_at,
        )

    def set_session_status(
        self,
        tx: MemoryTx,
        session_id: str,
        status: SessionStatus,
        *,
        at: datetime,
        only_from: SessionStatus | None = None,
    ) -> None:
        """Set the session status (``only_from``: only while it is still that one)."""
        session = self._t.sessions.get(session_id)
        if only_from is not None and (session is None or session.status is not only_from):
            return
        self._update_session(tx, session_id, status=status, updated_at=at)

    def reopen_session(self, tx: MemoryTx, session_id: str, *, at: datetime) -> bool:
        """``done`` -> ``queued``; True when it was done."""
        session = self._t.sessions.get(session_id)
        if session is None or session.status is not SessionStatus.DONE:
            return False
        self._update_session(tx, session_id, status=SessionStatus.QUEUED, updated_at=at)
        return True

    def request_cancel(self, tx: MemoryTx, session_id: str, *, at: datetime) -> None:
        """Set the cancel flag (the first request's time is kept)."""
        session = self._t.sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        self._update_session(
            tx, session_id, cancel_requested_at=session.cancel_requested_at or at, updated_at=at
        )

    def add_outbox(self, tx: MemoryTx, record: OutboxRecord) -> None:
        """Record a publish owed to the broker."""
        self._t.put(tx, self._t.outbox, record.outbox_id, record)

    def mark_published(self, outbox_id: str, *, at: datetime) -> None:
        """Mark an outbox row published and count the attempt (its own commit)."""
        with self.transaction() as tx:
            record = self._t.outbox[outbox_id]
            self._t.put(
                tx,
                self._t.outbox,
                outbox_id,
                record.model_copy(update={"published_at": at, "attempts": record.attempts + 1}),
            )

    def bump_epoch(self, session_id: str, *, at: datetime) -> int:
        """Increment the fencing epoch; status → running; settle the crash counter.

        The previous owner, if still open, counts as a crashed delivery unless
        it made progress (``ledger/sql_owners.py``); the new owner is open.
        """
        with self.transaction() as tx:
            session = self._t.sessions.get(session_id)
            if session is None:
                raise NotFoundError(f"no session {session_id}")
            epoch = session.lease_epoch + 1
            streak = session.crash_streak
            if session.open_epoch is not None:
                gone = self.owners.progressed(session_id, session.open_epoch)
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
        with self._t.lock:
            old = self._t.fleet.get(key)
            self._t.fleet[key] = value
            return old
