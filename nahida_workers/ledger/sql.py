"""The SQL ledger: PostgreSQL (psycopg 3) and SQLite through SQLAlchemy 2 Core.

Writes take the caller's :class:`SqlTx` and never commit on their own; the
runtime opens one transaction per commit point of DESIGN.md section 3.  A
fenced transaction locks the session row (``FOR UPDATE``) and checks the
writer's epoch: a concurrent epoch bump (a new lease owner) either waits for
us or makes us see the new epoch and refuse -- the writer that lost its lease
cannot write a single row (DESIGN.md section 4).  SQLite serialises writers
with ``BEGIN IMMEDIATE`` instead of row locks.  On PostgreSQL a commit point
is one statement (:mod:`~nahida_workers.ledger.pg_commit`).

This module owns transactions, fencing and the event/receipt writes; the
other rows and the reads live in ``sql_records.py`` and ``sql_reads.py``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, StatementError

from nahida_workers.core.event_payloads import payload_json
from nahida_workers.core.events import (
    Event,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import InboxStatus
from nahida_workers.errors import (
    EventAfterTerminalError,
    LedgerIntegrityError,
    NotFoundError,
)
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.parts import forward
from nahida_workers.ledger.pg_commit import fenced_insert, lock_and_prefetch, seal_pg
from nahida_workers.ledger.rules import (
    RunFacts,
    call_ids,
    cap_payload,
    check_append,
    check_receipts,
    record_events,
    storable_events,
    storable_receipts,
)
from nahida_workers.ledger.sql_base import (
    SqlTx,
    check_epoch,
    database_error,
    integrity,
    make_engine,
    now,
)
from nahida_workers.ledger.sql_facts import exact_facts
from nahida_workers.ledger.sql_inbox import SqlInbox
from nahida_workers.ledger.sql_owners import SqlOwners
from nahida_workers.ledger.sql_reads import SqlReads
from nahida_workers.ledger.sql_records import SqlRecords
from nahida_workers.ports import Fence

__all__ = ["SqlLedger", "SqlTx", "make_engine"]

DEFAULT_PAYLOAD_MAX_BYTES = 256 * 1024
#: Owners whose run facts are carried between commit points (LRU bound).
CARRIED_FACTS_MAX = 4096
#: Runs whose session id is remembered across transactions (LRU bound). The
#: pair never changes, so a forgotten run costs one SELECT on its next write;
#: unbounded, a session worker kept every run it ever wrote (its RSS grew with every session).
RUN_SESSIONS_MAX = 4096


def _raise_mapped(exc: BaseException) -> None:
    """Re-raise a database error as the ledger's typed error (else return)."""
    if isinstance(exc, IntegrityError):
        raise integrity(exc) from None
    if isinstance(exc, StatementError):
        raise database_error(exc) from exc


class SqlLedger:
    """The ledger on a SQL database (see :class:`nahida_workers.ports.Ledger`).

    This class is the core -- transactions, fencing, event and receipt
    writes, the seal -- and is built from parts it holds (composition, no
    mixins): ``records`` (:class:`~.sql_records.SqlRecords`), ``reads``
    (:class:`~.sql_reads.SqlReads`), ``inbox_part``
    (:class:`~.sql_inbox.SqlInbox`) and ``owners``
    (:class:`~.sql_owners.SqlOwners`); their methods are forwarded, so one
    object implements every ledger port.

    Args:
        url: SQLAlchemy URL (``postgresql+psycopg://...`` or ``sqlite:///path``).
        payload_max_bytes: cap on one event payload's JSON size, in bytes.
        engine: an existing engine (tests share one).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        payload_max_bytes: int = DEFAULT_PAYLOAD_MAX_BYTES,
        engine: Engine | None = None,
    ) -> None:
        if engine is None:
            if url is None:
                raise ValueError("SqlLedger needs a url or an engine")
            engine = make_engine(url)
        self.engine = engine
        self.payload_max_bytes = payload_max_bytes
        self._run_session: OrderedDict[str, str] = OrderedDict()
        self._carried: OrderedDict[Any, RunFacts] = OrderedDict()
        self._carried_lock = threading.Lock()  # guards _carried and _run_session
        self.pg = engine.dialect.name == "postgresql"
        # Reads: autocommit on PostgreSQL (no BEGIN/ROLLBACK round trips),
        # deferred transactions on SQLite.
        self.reader: Engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.pg
            else engine.execution_options(ledger_read=True)
        )
        self.records = SqlRecords(self)
        self.reads = SqlReads(self)
        self.inbox_part = SqlInbox(self)
        self.owners = SqlOwners(self)

    # -- the parts' methods ------------------------------------------------------
    create_batch = forward("records", SqlRecords.create_batch)
    create_session = forward("records", SqlRecords.create_session)
    open_session = forward("records", SqlRecords.open_session)
    create_run = forward("records", SqlRecords.create_run)
    finish_run = forward("records", SqlRecords.finish_run)
    set_session_status = forward("records", SqlRecords.set_session_status)
    request_cancel = forward("records", SqlRecords.request_cancel)
    reopen_session = forward("records", SqlRecords.reopen_session)
    add_outbox = forward("records", SqlRecords.add_outbox)
    mark_published = forward("records", SqlRecords.mark_published)
    bump_epoch = forward("records", SqlRecords.bump_epoch)
    swap_fleet_value = forward("records", SqlRecords.swap_fleet_value)
    enqueue_inbox = forward("inbox_part", SqlInbox.enqueue_inbox)
    claim_inbox = forward("inbox_part", SqlInbox.claim_inbox)
    acknowledge_inbox = forward("inbox_part", SqlInbox.acknowledge_inbox)
    inbox = forward("inbox_part", SqlInbox.inbox)
    close_owner = forward("owners", SqlOwners.close_owner)
    put_artifact = forward("owners", SqlOwners.put_artifact)
    get_artifact = forward("owners", SqlOwners.get_artifact)
    load_run = forward("reads", SqlReads.load_run)
    get_session = forward("reads", SqlReads.get_session)
    get_run = forward("reads", SqlReads.get_run)
    runs_of = forward("reads", SqlReads.runs_of)
    events = forward("reads", SqlReads.events)
    receipts = forward("reads", SqlReads.receipts)
    quiet_sessions = forward("reads", SqlReads.quiet_sessions)
    sessions = forward("reads", SqlReads.sessions)
    session_counts = forward("reads", SqlReads.session_counts)
    batches = forward("reads", SqlReads.batches)
    get_batch = forward("reads", SqlReads.get_batch)
    pending_outbox = forward("reads", SqlReads.pending_outbox)

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()

    # -- transactions ----------------------------------------------------------
    @contextmanager
    def transaction(
        self, *, fence: Fence | None = None, run_id: str | None = None
    ) -> Iterator[SqlTx]:
        """Open a transaction; with ``fence`` lock the session row and check it.

        ``run_id`` names the run the transaction writes (a commit point).  On
        PostgreSQL the fence is then checked by the write statement itself,
        against the run's facts carried from this owner's previous commit
        point (:mod:`~nahida_workers.ledger.pg_commit`): a commit point that
        only appends costs one round trip, and a stale fence is refused at the
        end of the block with nothing written.  Without ``run_id`` (or on
        SQLite) the fence is checked on entry.

        Raises:
            StaleEpochError: the fence is stale.
            LedgerIntegrityError: a write broke a ledger rule (rolled back).
            LedgerUnavailableError: the database went away or the commit failed.
        """
        carry_key = (fence.session_id, fence.epoch, run_id) if fence and run_id else None
        fast = carry_key is not None and self.pg
        carried = self._carried_facts(carry_key) if fast else None
        try:
            if carried is not None:
                assert fence is not None and run_id is not None
                with ExitStack() as stack:
                    tx = SqlTx(None, materialize=lambda tx: self._materialize(tx, stack))
                    tx.pending = fence
                    tx.facts[run_id] = carried
                    tx.runs[run_id] = fence.session_id
                    yield tx
                    if tx.buffered is not None:
                        with pg_raw.autocommit(self.engine) as run:
                            self._send_buffered(tx, run)
            else:
                with self.engine.begin() as conn:
                    tx = SqlTx(conn)
                    if fast:
                        assert fence is not None and run_id is not None
                        self._lock_and_prefetch(tx, fence, run_id)
                    elif fence is not None:
                        self.lock_session(tx, fence.session_id, fence.epoch)
                    yield tx
            # Only committed runs enter the process-wide cache: a rolled-back
            # run must stay unknown.
            self._remember_runs(tx.runs)
            if fast and tx.fence is not None:
                self.carry(carry_key, tx.facts.get(run_id or ""))
        except BaseException as exc:
            if fast:
                self.carry(carry_key, None)
            _raise_mapped(exc)
            raise

    def raw(self, fixed: pg_raw.Fixed, **values: Any) -> list[Any]:
        """Rows of a fixed statement run alone (its own commit) on PostgreSQL.

        Errors are mapped as in :meth:`transaction`.
        """
        try:
            return pg_raw.read(self.engine, fixed, **values)
        except BaseException as exc:
            _raise_mapped(exc)
            raise

    @contextmanager
    def single_statement_raw(self) -> Iterator[pg_raw.Runner]:
        """A runner for fixed statements that are each their own commit (PostgreSQL).

        Errors are mapped as in :meth:`transaction`.
        """
        try:
            with pg_raw.autocommit(self.engine) as run:
                yield run
        except BaseException as exc:
            _raise_mapped(exc)
            raise

    @contextmanager
    def single_statement(self) -> Iterator[Connection]:
        """A connection for a write that is ONE statement.

        PostgreSQL: an autocommit connection -- the statement is atomic on its
        own, so it costs one round trip instead of BEGIN + statement + COMMIT.
        SQLite: an ordinary (``BEGIN IMMEDIATE``) transaction.  Errors are
        mapped as in :meth:`transaction`.
        """
        if not self.pg:
            with self.transaction() as tx:
                yield tx.conn
            return
        try:
            with self.reader.connect() as conn:
                yield conn
        except BaseException as exc:
            _raise_mapped(exc)
            raise

    def _materialize(self, tx: SqlTx, stack: ExitStack) -> Connection:
        """Turn a deferred transaction into a real one; send what it buffered."""
        conn = stack.enter_context(self.engine.begin())
        tx._conn = conn
        self._send_buffered(tx, pg_raw.runner(conn))
        return conn

    def _send_buffered(self, tx: SqlTx, run: pg_raw.Runner) -> None:
        """Write the buffered appends in one fenced statement."""
        buffered, tx.buffered = tx.buffered or [], None
        if not buffered:
            return
        fence = tx.fence or tx.pending
        assert fence is not None
        events = [row for rows, _ in buffered for row in rows]
        receipts = [row for _, rows in buffered for row in rows]
        written = fenced_insert(run, fence.session_id, fence.epoch, events, receipts)
        if written is None:
            raise NotFoundError(f"no session {fence.session_id}")
        check_epoch(fence.session_id, fence.epoch, written.epoch)
        tx.fence, tx.pending = fence, None
        tx.cancel_requested = written.cancel_requested
        tx.pending_inbox = written.pending_inbox

    def _remember_runs(self, runs: Mapping[str, str]) -> None:
        """Remember committed runs' session ids, the most recent ``RUN_SESSIONS_MAX``."""
        if not runs:
            return
        with self._carried_lock:
            for run_id, session_id in runs.items():
                self._run_session[run_id] = session_id
                self._run_session.move_to_end(run_id)
            while len(self._run_session) > RUN_SESSIONS_MAX:
                self._run_session.popitem(last=False)

    def _carried_facts(self, key: Any) -> RunFacts | None:
        with self._carried_lock:
            facts = self._carried.get(key)
            return None if facts is None else facts.copy()

    def carry(self, key: Any, facts: RunFacts | None) -> None:
        """Keep (or with None, forget) an owner's facts for its next commit point."""
        with self._carried_lock:
            self._carried.pop(key, None)
            if facts is not None and not facts.has_terminal:
                self._carried[key] = facts.open_only()
                while len(self._carried) > CARRIED_FACTS_MAX:
                    self._carried.popitem(last=False)

    def _lock_and_prefetch(self, tx: SqlTx, fence: Fence, run_id: str) -> None:
        locked = lock_and_prefetch(pg_raw.runner(tx.conn), fence.session_id, run_id)
        if locked is None:
            raise NotFoundError(f"no session {fence.session_id}")
        check_epoch(fence.session_id, fence.epoch, locked.epoch)
        tx.fence = fence
        tx.cancel_requested = locked.cancel_requested
        tx.pending_inbox = locked.pending_inbox
        tx.facts[run_id] = locked.facts

    def lock_session(self, tx: SqlTx, session_id: str, epoch: int) -> None:
        """Lock the session row and check that ``epoch`` is its current epoch.

        Raises:
            NotFoundError: no such session.
            StaleEpochError: another owner bumped the epoch.
        """
        ib = t.session_inbox.c
        pending = (
            select(func.count())
            .where(
                ib.session_id == session_id,
                ib.status == InboxStatus.PENDING.value,
                ib.next_turn.is_(True),
            )
            .scalar_subquery()
        )
        row = tx.conn.execute(
            select(t.sessions.c.lease_epoch, t.sessions.c.cancel_requested_at, pending)
            .where(t.sessions.c.session_id == session_id)
            .with_for_update(of=t.sessions)
        ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        check_epoch(session_id, epoch, row.lease_epoch)
        tx.fence = Fence(session_id, epoch)
        tx.cancel_requested = row.cancel_requested_at is not None
        tx.pending_inbox = int(row[2])

    def require_fence(self, tx: SqlTx, run_id: str, *, locks_itself: bool = False) -> Fence:
        """The fence a write to ``run_id`` runs under.

        A pending fence (fast path) is checked here with a plain lock, unless
        the write's own statement takes the lock (``locks_itself``).
        """
        if tx.pending is not None and not locks_itself:
            tx.conn  # noqa: B018  (a deferred transaction flushes its appends here)
            if tx.pending is not None:
                pending, tx.pending = tx.pending, None
                self.lock_session(tx, pending.session_id, pending.epoch)
        fence = tx.fence or tx.pending
        if fence is None:
            raise LedgerIntegrityError("event and receipt writes need a fenced transaction")
        session_id = self._run_session.get(run_id) or tx.runs.get(run_id)
        if session_id is None:
            session_id = tx.conn.execute(
                select(t.agent_runs.c.session_id).where(t.agent_runs.c.run_id == run_id)
            ).scalar()
            if session_id is None:
                raise NotFoundError(f"no run {run_id}")
            tx.runs[run_id] = session_id
        if session_id != fence.session_id:
            raise LedgerIntegrityError(f"run {run_id} does not belong to the fenced session")
        return fence

    def _facts(self, tx: SqlTx, run_id: str, ids: Sequence[str]) -> RunFacts:
        """The facts a write to ``run_id`` naming ``ids`` is checked against.

        Cached for the rest of the transaction (the row lock keeps them true)
        and updated by this transaction's own writes.
        """
        facts = tx.facts.get(run_id)
        if facts is None:
            facts = exact_facts(tx.conn, run_id, ids)
            tx.facts[run_id] = facts
            tx.known_ids.update(ids)
            return facts
        if facts.partial:
            return facts
        wanted = [i for i in ids if i not in tx.known_ids]
        if wanted:
            more = exact_facts(tx.conn, run_id, wanted, base=False)
            facts.calls |= more.calls
            facts.results |= more.results
            facts.receipts |= more.receipts
            tx.known_ids.update(wanted)
        return facts

    def _check(
        self, tx: SqlTx, run_id: str, ids: Sequence[str], check: Callable[[RunFacts], None]
    ) -> RunFacts:
        """Run a rule check; a refusal made on partial facts is re-checked exactly."""
        facts = self._facts(tx, run_id, ids)
        try:
            check(facts)
        except LedgerIntegrityError:
            if not facts.partial:
                raise
            check(exact_facts(tx.conn, run_id, ids))  # raises the precise refusal
            raise
        return facts

    def append(
        self, tx: SqlTx, events: Sequence[Event], receipts: Sequence[ExecutionReceipt] = ()
    ) -> None:
        """Events, then their receipts, checked as one write (a commit point).

        On PostgreSQL both inserts go out as one statement
        (:func:`~nahida_workers.ledger.sql_facts.insert_rows_pg`), so a commit
        point costs three round trips: lock-and-prefetch, insert, commit.
        """
        run_id = (events[0] if events else receipts[0]).run_id if events or receipts else ""
        if not run_id:
            return
        events, receipts = storable_events(events), storable_receipts(receipts)
        if any(r.run_id != run_id for r in receipts) or any(e.run_id != run_id for e in events):
            raise LedgerIntegrityError("one append must hold events and receipts of one run")
        fence = self.require_fence(tx, run_id, locks_itself=self.pg)
        facts: RunFacts | None = None
        if events:
            facts = self._check(tx, run_id, call_ids(events), lambda f: check_append(f, events))
        if facts is not None:
            # Later checks of this write (its receipts) see its own events;
            # a failure below aborts the transaction and drops these facts.
            record_events(facts, events)
            tx.known_ids.update(call_ids(events))
        if receipts:
            ids = sorted({r.call_id for r in receipts})
            facts = self._check(tx, run_id, ids, lambda f: check_receipts(f, receipts))
        event_rows = [self.event_row(e, fence.epoch) for e in events]
        receipt_rows = [self._receipt_row(r, fence.epoch) for r in receipts]
        if tx.buffered is not None:
            tx.buffered.append((event_rows, receipt_rows))
        elif self.pg:
            written = fenced_insert(
                pg_raw.runner(tx.conn), fence.session_id, fence.epoch, event_rows, receipt_rows
            )
            if written is None:
                raise NotFoundError(f"no session {fence.session_id}")
            check_epoch(fence.session_id, fence.epoch, written.epoch)
            tx.fence, tx.pending = fence, None
            tx.cancel_requested = written.cancel_requested
            tx.pending_inbox = written.pending_inbox
        else:
            if event_rows:
                tx.conn.execute(insert(t.agent_run_events), event_rows)
            if receipt_rows:
                tx.conn.execute(insert(t.agent_execution_receipts), receipt_rows)
        if facts is not None:
            facts.receipts.update(r.call_id for r in receipts)

    def seal_run(
        self,
        tx: SqlTx,
        event: Event,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
        closing: Sequence[Event] = (),
        receipts: Sequence[ExecutionReceipt] = (),
    ) -> None:
        """The run's terminal commit point (DESIGN.md section 3 step 6, section 8).

        ``closing`` (synthetic results of the calls still open) and their
        ``receipts`` first, then the terminal ``event``, the run row's terminal
        state, the acknowledgement of every inbox message the run claimed, and
        ``sessions.status = done``
        with the cancel request consumed (a cancel is for the open run).
        On the PostgreSQL fast path (a deferred transaction with nothing else
        buffered) this is ONE autocommit statement (:func:`seal_pg`);
        otherwise the four writes run in the transaction.

        Raises:
            StaleEpochError: the fence is stale (nothing written).
            EventAfterTerminalError: the run already has a terminal state.
        """
        (event,) = storable_events([event])
        run_id = event.run_id
        terminal = {
            "run_id": run_id,
            "state": state.value,
            "reason": reason.value,
            "failure_code": failure_code.value if failure_code else None,
            "ended_at": ended_at,
        }
        if closing or receipts:
            self.append(tx, closing, receipts)  # then the slow path below, same transaction
        elif self.pg and tx._conn is None and tx.pending is not None and not tx.buffered:
            fence = self.require_fence(tx, run_id, locks_itself=True)
            self._check(tx, run_id, call_ids([event]), lambda f: check_append(f, [event]))
            if tx._conn is None:  # the check needed no read: still one statement
                self._seal_in_one_statement(tx, fence, event, terminal)
                return
        self.append(tx, [event])
        fence = self.require_fence(tx, run_id)
        self.finish_run(
            tx, run_id, state=state, reason=reason, failure_code=failure_code, ended_at=ended_at
        )
        self.acknowledge_inbox(tx, run_id, at=ended_at)
        tx.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == fence.session_id)
            .values(status=SessionStatus.DONE.value, cancel_requested_at=None, updated_at=ended_at)
        )

    def _seal_in_one_statement(
        self, tx: SqlTx, fence: Fence, event: Event, terminal: dict[str, Any]
    ) -> None:
        with self.single_statement_raw() as run:
            sealed = seal_pg(
                run, fence.session_id, fence.epoch, terminal, [self.event_row(event, fence.epoch)]
            )
        if sealed is None:
            raise NotFoundError(f"no session {fence.session_id}")
        check_epoch(fence.session_id, fence.epoch, sealed.epoch)
        if not sealed.sealed:
            raise EventAfterTerminalError(f"run {event.run_id} already has a terminal state")
        tx.fence, tx.pending = fence, None
        facts = tx.facts.get(event.run_id)
        if facts is not None:
            record_events(facts, [event])

    def event_row(self, e: Event, epoch: int) -> dict[str, Any]:
        """The ``agent_run_events`` row of ``e`` written at ``epoch`` (payload capped)."""
        return {
            "run_id": e.run_id,
            "sequence": e.sequence,
            "event_type": e.type.value,
            "call_id": e.call_id,
            "payload_json": cap_payload(payload_json(e.payload), self.payload_max_bytes),
            "epoch": epoch,
            "created_at": e.created_at or now(),
        }

    def _receipt_row(self, r: ExecutionReceipt, epoch: int) -> dict[str, Any]:
        return {
            "run_id": r.run_id,
            "call_id": r.call_id,
            "tool_name": r.tool_name,
            "status": r.status.value,
            "input_fingerprint": r.input_fingerprint,
            "evidence_json": cap_payload(dict(r.evidence), self.payload_max_bytes),
            "evidence_kind": r.evidence_kind.value,
            "verification_status": r.verification_status.value,
            "idempotency_key": r.idempotency_key,
            "epoch": epoch,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
        }
