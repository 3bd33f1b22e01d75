"""The SQL ledger: PostgreSQL (psycopg 3) and SQLite through SQLAlchemy 2 Core.

Writes take the caller's :class:`SqlTx` and never commit on their own; the
runtime opens one transaction per commit point of DESIGN.md section 3.  A
fenced transaction starts with ``SELECT lease_epoch ... FOR UPDATE`` on the
session row: a concurrent epoch bump (a new lease owner) either waits for us
or makes us see the new epoch and refuse -- the writer that lost its lease
cannot write a single row (DESIGN.md section 4).  SQLite serialises writers
with ``BEGIN IMMEDIATE`` instead of row locks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.pool import NullPool

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    EventType,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import BatchRecord, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.errors import (
    DuplicateResultError,
    DuplicateSequenceError,
    EventAfterTerminalError,
    LedgerIntegrityError,
    LedgerUnavailableError,
    NotFoundError,
    StaleEpochError,
)
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.pg_commit import fenced_insert, lock_and_prefetch
from nahida_workers.ledger.rules import (
    RunFacts,
    call_ids,
    cap_payload,
    check_append,
    check_receipts,
    record_events,
)
from nahida_workers.ledger.sql_facts import exact_facts
from nahida_workers.ports import Fence

__all__ = ["SqlLedger", "SqlTx", "make_engine"]

DEFAULT_PAYLOAD_MAX_BYTES = 256 * 1024
#: Owners whose run facts are carried between commit points (LRU bound).
CARRIED_FACTS_MAX = 4096


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url`` with the settings the ledger relies on.

    SQLite: WAL, a 30 s busy timeout, connections shared across threads and
    ``BEGIN IMMEDIATE`` so writers serialise at the start of a transaction.
    PostgreSQL: a pool without pre-ping (see below).
    """
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            poolclass=NullPool if ":memory:" not in url else None,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front; readers stay deferred so
            # they never block a writer (WAL lets them read concurrently).
            if conn.get_execution_options().get("ledger_read"):
                conn.exec_driver_sql("BEGIN")
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    # No pre-ping: it costs a round trip per transaction.  A connection the
    # server dropped fails its statement, SQLAlchemy invalidates the pool, and
    # the caller sees LedgerUnavailableError (retryable); the next checkout
    # connects afresh.
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=3600)


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


def _check_epoch(session_id: str, writer: int, current: int) -> None:
    if writer != current:
        raise StaleEpochError(
            f"session {session_id}: writer epoch {writer} is stale (current {current})"
        )


class SqlTx:
    """An open transaction: its connection and the fence it was opened with.

    ``pending`` is a fence not yet checked: on the PostgreSQL fast path the
    write statement itself takes the row lock and checks the epoch.  A
    *deferred* transaction has no connection yet: its appends are buffered and
    sent at the end as ONE autocommit statement (a commit point in one round
    trip); any other use of :attr:`conn` opens a real transaction first.
    """

    def __init__(
        self, conn: Connection | None, *, materialize: Callable[[SqlTx], Connection] | None = None
    ) -> None:
        self._conn = conn
        self._materialize = materialize
        self.fence: Fence | None = None
        self.pending: Fence | None = None
        self.cancel_requested = False  # read with the fence's row lock
        self.facts: dict[str, RunFacts] = {}
        self.known_ids: set[str] = set()
        self.runs: dict[str, str] = {}  # run_id -> session_id written or read in this tx
        self.buffered: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] | None = (
            [] if conn is None else None
        )

    @property
    def conn(self) -> Connection:
        """The connection (a deferred transaction becomes a real one here)."""
        if self._conn is None:
            assert self._materialize is not None
            self._conn = self._materialize(self)
        return self._conn


def _integrity(exc: IntegrityError) -> LedgerIntegrityError:
    """Map a constraint violation that slipped past the pre-checks (a race).

    PostgreSQL names the constraint; SQLite names the columns.
    """
    text = str(exc.orig).splitlines()[0]
    if "uq_events_run_sequence" in text or "agent_run_events.sequence" in text:
        return DuplicateSequenceError(f"duplicate (run_id, sequence): {text}")
    if "uq_events_one_terminal" in text or text.endswith("agent_run_events.run_id"):
        return EventAfterTerminalError(f"a terminal event is already committed: {text}")
    if "uq_events_run_call_type" in text or "uq_receipts_run_call" in text or "call_id" in text:
        return DuplicateResultError(f"second row for one call: {text}")
    return LedgerIntegrityError(f"ledger constraint violated: {text}")


class SqlLedger:
    """The ledger on a SQL database (see :class:`nahida_workers.ports.Ledger`).

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
        self._run_session: dict[str, str] = {}
        self._carried: OrderedDict[Any, RunFacts] = OrderedDict()
        self._carried_lock = threading.Lock()
        self._pg = engine.dialect.name == "postgresql"
        # Reads: autocommit on PostgreSQL (no BEGIN/ROLLBACK round trips),
        # deferred transactions on SQLite.
        self._reader = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self._pg
            else engine.execution_options(ledger_read=True)
        )

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
        fast = carry_key is not None and self._pg
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
                        self._send_buffered(tx, self._autocommit_connection(stack))
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
            self._run_session.update(tx.runs)
            if fast and tx.fence is not None:
                self._carry(carry_key, tx.facts.get(run_id or ""))
        except BaseException as exc:
            if fast:
                self._carry(carry_key, None)
            if isinstance(exc, IntegrityError):
                raise _integrity(exc) from None
            if isinstance(exc, OperationalError | DBAPIError):
                raise LedgerUnavailableError(
                    f"ledger unavailable: {type(exc.orig).__name__}: {str(exc.orig).strip()[:200]}"
                ) from exc
            raise

    def _autocommit_connection(self, stack: ExitStack) -> Connection:
        return stack.enter_context(self._reader.connect())

    def _materialize(self, tx: SqlTx, stack: ExitStack) -> Connection:
        """Turn a deferred transaction into a real one; send what it buffered."""
        conn = stack.enter_context(self.engine.begin())
        tx._conn = conn
        self._send_buffered(tx, conn)
        return conn

    def _send_buffered(self, tx: SqlTx, conn: Connection) -> None:
        """Write the buffered appends in one fenced statement."""
        buffered, tx.buffered = tx.buffered or [], None
        if not buffered:
            return
        fence = tx.fence or tx.pending
        assert fence is not None
        events = [row for rows, _ in buffered for row in rows]
        receipts = [row for _, rows in buffered for row in rows]
        written = fenced_insert(conn, fence.session_id, fence.epoch, events, receipts)
        if written is None:
            raise NotFoundError(f"no session {fence.session_id}")
        _check_epoch(fence.session_id, fence.epoch, written.epoch)
        tx.fence, tx.pending = fence, None
        tx.cancel_requested = written.cancel_requested

    def _carried_facts(self, key: Any) -> RunFacts | None:
        with self._carried_lock:
            facts = self._carried.get(key)
            return None if facts is None else facts.copy()

    def _carry(self, key: Any, facts: RunFacts | None) -> None:
        """Keep (or with None, forget) an owner's facts for its next commit point."""
        with self._carried_lock:
            self._carried.pop(key, None)
            if facts is not None and not facts.has_terminal:
                self._carried[key] = facts.open_only()
                while len(self._carried) > CARRIED_FACTS_MAX:
                    self._carried.popitem(last=False)

    def _lock_and_prefetch(self, tx: SqlTx, fence: Fence, run_id: str) -> None:
        locked = lock_and_prefetch(tx.conn, fence.session_id, run_id)
        if locked is None:
            raise NotFoundError(f"no session {fence.session_id}")
        _check_epoch(fence.session_id, fence.epoch, locked.epoch)
        tx.fence = fence
        tx.cancel_requested = locked.cancel_requested
        tx.facts[run_id] = locked.facts

    def lock_session(self, tx: SqlTx, session_id: str, epoch: int) -> None:
        """Lock the session row and check that ``epoch`` is its current epoch.

        Raises:
            NotFoundError: no such session.
            StaleEpochError: another owner bumped the epoch.
        """
        row = tx.conn.execute(
            select(t.sessions.c.lease_epoch, t.sessions.c.cancel_requested_at)
            .where(t.sessions.c.session_id == session_id)
            .with_for_update()
        ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        _check_epoch(session_id, epoch, row.lease_epoch)
        tx.fence = Fence(session_id, epoch)
        tx.cancel_requested = row.cancel_requested_at is not None

    def _require_fence(self, tx: SqlTx, run_id: str, *, locks_itself: bool = False) -> Fence:
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

    # -- writes ------------------------------------------------------------------
    def create_batch(self, tx: SqlTx, batch: BatchRecord) -> None:
        """Insert a batch row."""
        tx.conn.execute(
            insert(t.batches).values(
                batch_id=batch.batch_id,
                job_name=batch.job_name,
                created_at=batch.created_at,
                spec_json=batch.spec,
            )
        )

    def create_session(self, tx: SqlTx, session: SessionRecord) -> tuple[SessionRecord, bool]:
        """Insert a session, or return the one holding its idempotency key.

        ``INSERT ... ON CONFLICT (idempotency_key) DO NOTHING`` makes two
        concurrent submits with one key create exactly one session.
        """
        values = {
            "session_id": session.session_id,
            "parent_id": session.parent_id,
            "batch_id": session.batch_id,
            "workspace": session.workspace,
            "status": session.status.value,
            "lease_epoch": session.lease_epoch,
            "config_json": session.config,
            "idempotency_key": session.idempotency_key,
            "created_at": session.created_at,
            "updated_at": session.updated_at,
            "cancel_requested_at": session.cancel_requested_at,
        }
        if session.idempotency_key is None:
            tx.conn.execute(insert(t.sessions).values(**values))
            self._created(tx, session)
            return session, True
        dialect_insert = pg_insert if tx.conn.dialect.name == "postgresql" else sqlite_insert
        # RETURNING, not rowcount: psycopg reports rowcount -1 for this statement.
        inserted = tx.conn.execute(
            dialect_insert(t.sessions)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["idempotency_key"])
            .returning(t.sessions.c.session_id)
        ).first()
        if inserted is not None:
            self._created(tx, session)
            return session, True
        existing = tx.conn.execute(
            select(t.sessions).where(t.sessions.c.idempotency_key == session.idempotency_key)
        ).one()
        return _session(existing), False

    @staticmethod
    def _created(tx: SqlTx, session: SessionRecord) -> None:
        """The creating transaction holds the new row's lock and its epoch-0 fence."""
        if tx.fence is None and tx.pending is None:
            tx.fence = Fence(session.session_id, session.lease_epoch)

    def create_run(self, tx: SqlTx, run: RunRecord) -> None:
        """Insert a run row."""
        tx.conn.execute(
            insert(t.agent_runs).values(
                run_id=run.run_id,
                session_id=run.session_id,
                provider=run.provider,
                model=run.model,
                completion_contract_json=run.completion_contract.model_dump(mode="json"),
                trace_id=run.trace_id,
                started_at=run.started_at,
            )
        )
        tx.runs[run.run_id] = run.session_id
        tx.facts[run.run_id] = RunFacts()  # a run just inserted has no events yet

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
        if any(r.run_id != run_id for r in receipts) or any(e.run_id != run_id for e in events):
            raise LedgerIntegrityError("one append must hold events and receipts of one run")
        fence = self._require_fence(tx, run_id, locks_itself=self._pg)
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
        event_rows = [self._event_row(e, fence.epoch) for e in events]
        receipt_rows = [self._receipt_row(r, fence.epoch) for r in receipts]
        if tx.buffered is not None:
            tx.buffered.append((event_rows, receipt_rows))
        elif self._pg:
            written = fenced_insert(
                tx.conn, fence.session_id, fence.epoch, event_rows, receipt_rows
            )
            if written is None:
                raise NotFoundError(f"no session {fence.session_id}")
            _check_epoch(fence.session_id, fence.epoch, written.epoch)
            tx.fence, tx.pending = fence, None
            tx.cancel_requested = written.cancel_requested
        else:
            if event_rows:
                tx.conn.execute(insert(t.agent_run_events), event_rows)
            if receipt_rows:
                tx.conn.execute(insert(t.agent_execution_receipts), receipt_rows)
        if facts is not None:
            facts.receipts.update(r.call_id for r in receipts)

    def append_events(self, tx: SqlTx, events: Sequence[Event]) -> None:
        """Insert events under the transaction's fence (rules in ``rules.py``)."""
        self.append(tx, events)

    def put_receipts(self, tx: SqlTx, receipts: Sequence[ExecutionReceipt]) -> None:
        """Insert receipts; each needs a committed tool_call and no prior receipt."""
        self.append(tx, (), receipts)

    def _event_row(self, e: Event, epoch: int) -> dict[str, Any]:
        return {
            "run_id": e.run_id,
            "sequence": e.sequence,
            "event_type": e.type.value,
            "call_id": e.call_id,
            "payload_json": cap_payload(e.payload, self.payload_max_bytes),
            "epoch": epoch,
            "created_at": e.created_at or _now(),
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

    def finish_run(
        self,
        tx: SqlTx,
        run_id: str,
        *,
        state: TerminalState,
        reason: ReasonCode,
        failure_code: FailureCode | None,
        ended_at: datetime,
    ) -> None:
        """Record the terminal state on the run row, exactly once."""
        self._require_fence(tx, run_id)
        runs = t.agent_runs.c
        result = tx.conn.execute(
            update(t.agent_runs)
            .where(runs.run_id == run_id, runs.terminal_state.is_(None))
            .values(
                terminal_state=state.value,
                terminal_reason=reason.value,
                failure_code=failure_code.value if failure_code else None,
                ended_at=ended_at,
            )
        )
        if result.rowcount != 1:
            raise EventAfterTerminalError(f"run {run_id} already has a terminal state")

    def set_session_status(
        self, tx: SqlTx, session_id: str, status: SessionStatus, *, at: datetime
    ) -> None:
        """Set ``sessions.status``."""
        tx.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id)
            .values(status=status.value, updated_at=at)
        )

    def request_cancel(self, tx: SqlTx, session_id: str, *, at: datetime) -> None:
        """Set the cancel flag (idempotent: the first request's time is kept)."""
        result = tx.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id)
            .values(
                cancel_requested_at=func.coalesce(t.sessions.c.cancel_requested_at, at),
                updated_at=at,
            )
        )
        if result.rowcount != 1:
            raise NotFoundError(f"no session {session_id}")

    def add_outbox(self, tx: SqlTx, record: OutboxRecord) -> None:
        """Record a publish owed to the broker."""
        tx.conn.execute(
            insert(t.dispatch_outbox).values(
                outbox_id=record.outbox_id,
                session_id=record.session_id,
                task_name=record.task_name,
                created_at=record.created_at,
                published_at=record.published_at,
                attempts=record.attempts,
            )
        )

    def mark_published(self, tx: SqlTx, outbox_id: str, *, at: datetime) -> None:
        """Mark an outbox row published and count the attempt."""
        ob = t.dispatch_outbox.c
        tx.conn.execute(
            update(t.dispatch_outbox)
            .where(ob.outbox_id == outbox_id)
            .values(published_at=at, attempts=ob.attempts + 1)
        )

    def bump_epoch(self, session_id: str, *, at: datetime) -> int:
        """Increment the fencing epoch in its own transaction; status → running."""
        with self.transaction() as tx:
            row = tx.conn.execute(
                update(t.sessions)
                .where(t.sessions.c.session_id == session_id)
                .values(
                    lease_epoch=t.sessions.c.lease_epoch + 1,
                    status=SessionStatus.RUNNING.value,
                    updated_at=at,
                )
                .returning(t.sessions.c.lease_epoch)
            ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        return int(row[0])

    # -- reads -------------------------------------------------------------------
    def _read(self) -> Any:
        return _ReadScope(self)

    def load_run(self, fence: Fence, run_id: str) -> tuple[list[Event], list[ExecutionReceipt]]:
        """A new owner's read of its run: every event and receipt.

        Called after :meth:`bump_epoch`: everything earlier owners committed is
        visible, and nobody else can write the run under this epoch, so the
        facts read here are carried to the owner's first commit point.
        """
        events, receipts = self.events(run_id), self.receipts(run_id)
        facts = RunFacts(max_sequence=events[-1].sequence if events else 0)
        record_events(facts, events)
        facts.receipts.update(r.call_id for r in receipts)
        if self._pg:
            self._carry((fence.session_id, fence.epoch, run_id), facts)
        return events, receipts

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session row or None."""
        with self._read() as conn:
            row = conn.execute(
                select(t.sessions).where(t.sessions.c.session_id == session_id)
            ).first()
        return None if row is None else _session(row)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run row or None."""
        with self._read() as conn:
            row = conn.execute(select(t.agent_runs).where(t.agent_runs.c.run_id == run_id)).first()
        return None if row is None else _run(row)

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        runs = t.agent_runs.c
        with self._read() as conn:
            rows = conn.execute(
                select(t.agent_runs)
                .where(runs.session_id == session_id)
                .order_by(runs.started_at, runs.run_id)
            ).all()
        return [_run(r) for r in rows]

    def events(self, run_id: str) -> list[Event]:
        """Events of a run by sequence."""
        ev = t.agent_run_events.c
        with self._read() as conn:
            rows = conn.execute(
                select(t.agent_run_events).where(ev.run_id == run_id).order_by(ev.sequence)
            ).all()
        return [
            Event(
                run_id=r.run_id,
                sequence=r.sequence,
                type=EventType(r.event_type),
                payload=r.payload_json,
                call_id=r.call_id,
                epoch=r.epoch,
                created_at=_utc(r.created_at),
            )
            for r in rows
        ]

    def receipts(self, run_id: str) -> list[ExecutionReceipt]:
        """Receipts of a run in the order they were written."""
        rc = t.agent_execution_receipts.c
        with self._read() as conn:
            rows = conn.execute(
                select(t.agent_execution_receipts)
                .where(rc.run_id == run_id)
                .order_by(rc.receipt_id)
            ).all()
        return [
            ExecutionReceipt(
                run_id=r.run_id,
                call_id=r.call_id,
                tool_name=r.tool_name,
                status=r.status,
                started_at=_utc(r.started_at),
                finished_at=_utc(r.finished_at),
                input_fingerprint=r.input_fingerprint,
                evidence=r.evidence_json,
                evidence_kind=r.evidence_kind,
                verification_status=r.verification_status,
                idempotency_key=r.idempotency_key,
                epoch=r.epoch,
            )
            for r in rows
        ]

    def sessions(
        self, *, batch_id: str | None = None, statuses: Sequence[SessionStatus] | None = None
    ) -> list[SessionRecord]:
        """Sessions, optionally by batch and status, oldest first."""
        s = t.sessions.c
        query = select(t.sessions).order_by(s.created_at, s.session_id)
        if batch_id is not None:
            query = query.where(s.batch_id == batch_id)
        if statuses is not None:
            query = query.where(s.status.in_([st.value for st in statuses]))
        with self._read() as conn:
            return [_session(r) for r in conn.execute(query).all()]

    def batches(self) -> list[BatchRecord]:
        """All batches, newest first."""
        b = t.batches.c
        with self._read() as conn:
            rows = conn.execute(select(t.batches).order_by(b.created_at.desc())).all()
        return [_batch(r) for r in rows]

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch or None."""
        with self._read() as conn:
            row = conn.execute(select(t.batches).where(t.batches.c.batch_id == batch_id)).first()
        return None if row is None else _batch(row)

    def pending_outbox(self, *, limit: int = 100) -> list[OutboxRecord]:
        """Outbox rows not yet published, oldest first."""
        ob = t.dispatch_outbox.c
        with self._read() as conn:
            rows = conn.execute(
                select(t.dispatch_outbox)
                .where(ob.published_at.is_(None))
                .order_by(ob.created_at)
                .limit(limit)
            ).all()
        return [
            OutboxRecord(
                outbox_id=r.outbox_id,
                session_id=r.session_id,
                task_name=r.task_name,
                created_at=_utc(r.created_at),
                published_at=_utc(r.published_at),
                attempts=r.attempts,
            )
            for r in rows
        ]


class _ReadScope:
    """A read-only connection scope that maps outages to LedgerUnavailableError."""

    def __init__(self, ledger: SqlLedger) -> None:
        self._ledger = ledger
        self._conn: Connection | None = None

    def __enter__(self) -> Connection:
        try:
            self._conn = self._ledger._reader.connect()
        except (OperationalError, DBAPIError) as exc:
            raise LedgerUnavailableError(f"ledger unavailable: {type(exc.orig).__name__}") from exc
        return self._conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._conn is not None
        try:
            self._conn.close()
        finally:
            if isinstance(exc, OperationalError | DBAPIError):
                raise LedgerUnavailableError(
                    f"ledger unavailable: {type(exc.orig).__name__}"
                ) from exc


def _session(row: Any) -> SessionRecord:
    return SessionRecord(
        session_id=row.session_id,
        parent_id=row.parent_id,
        batch_id=row.batch_id,
        workspace=row.workspace,
        status=SessionStatus(row.status),
        lease_epoch=row.lease_epoch,
        config=row.config_json,
        idempotency_key=row.idempotency_key,
        created_at=_utc(row.created_at),
        updated_at=_utc(row.updated_at),
        cancel_requested_at=_utc(row.cancel_requested_at),
    )


def _run(row: Any) -> RunRecord:
    return RunRecord(
        run_id=row.run_id,
        session_id=row.session_id,
        provider=row.provider,
        model=row.model,
        completion_contract=CompletionContract.model_validate(row.completion_contract_json),
        trace_id=row.trace_id,
        started_at=_utc(row.started_at),
        ended_at=_utc(row.ended_at),
        terminal_state=TerminalState(row.terminal_state) if row.terminal_state else None,
        terminal_reason=ReasonCode(row.terminal_reason) if row.terminal_reason else None,
        failure_code=FailureCode(row.failure_code) if row.failure_code else None,
    )


def _batch(row: Any) -> BatchRecord:
    return BatchRecord(
        batch_id=row.batch_id,
        job_name=row.job_name,
        created_at=_utc(row.created_at),
        spec=row.spec_json,
    )
