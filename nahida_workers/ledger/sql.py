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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, update
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
from nahida_workers.ledger.rules import (
    RunFacts,
    call_ids,
    cap_payload,
    check_append,
    check_receipts,
)
from nahida_workers.ports import Fence

__all__ = ["SqlLedger", "SqlTx", "make_engine"]

DEFAULT_PAYLOAD_MAX_BYTES = 256 * 1024


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url`` with the settings the ledger relies on.

    SQLite: WAL, a 30 s busy timeout, connections shared across threads and
    ``BEGIN IMMEDIATE`` so writers serialise at the start of a transaction.
    PostgreSQL: pre-ping so a restarted server costs one failed checkout.
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
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size)


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


class SqlTx:
    """An open transaction: the connection and the fence it was opened with."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.fence: Fence | None = None
        self.runs: dict[str, str] = {}  # run_id -> session_id written or read in this tx


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

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()

    # -- transactions ----------------------------------------------------------
    @contextmanager
    def transaction(self, *, fence: Fence | None = None) -> Iterator[SqlTx]:
        """Open a transaction; with ``fence`` lock the session row and check it.

        Raises:
            StaleEpochError: the fence is stale.
            LedgerIntegrityError: a write broke a ledger rule (rolled back).
            LedgerUnavailableError: the database went away or the commit failed.
        """
        try:
            with self.engine.begin() as conn:
                tx = SqlTx(conn)
                if fence is not None:
                    self.lock_session(tx, fence.session_id, fence.epoch)
                yield tx
            # Only committed runs enter the process-wide cache: a rolled-back
            # run must stay unknown.
            self._run_session.update(tx.runs)
        except IntegrityError as exc:
            raise _integrity(exc) from None
        except (OperationalError, DBAPIError) as exc:
            raise LedgerUnavailableError(
                f"ledger unavailable: {type(exc.orig).__name__}: {str(exc.orig).strip()[:200]}"
            ) from exc

    def lock_session(self, tx: SqlTx, session_id: str, epoch: int) -> None:
        """Lock the session row and check that ``epoch`` is its current epoch.

        Raises:
            NotFoundError: no such session.
            StaleEpochError: another owner bumped the epoch.
        """
        row = tx.conn.execute(
            select(t.sessions.c.lease_epoch)
            .where(t.sessions.c.session_id == session_id)
            .with_for_update()
        ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        if row.lease_epoch != epoch:
            raise StaleEpochError(
                f"session {session_id}: writer epoch {epoch} is stale (current {row.lease_epoch})"
            )
        tx.fence = Fence(session_id, epoch)

    def _require_fence(self, tx: SqlTx, run_id: str) -> Fence:
        if tx.fence is None:
            raise LedgerIntegrityError("event and receipt writes need a fenced transaction")
        session_id = self._run_session.get(run_id) or tx.runs.get(run_id)
        if session_id is None:
            session_id = tx.conn.execute(
                select(t.agent_runs.c.session_id).where(t.agent_runs.c.run_id == run_id)
            ).scalar()
            if session_id is None:
                raise NotFoundError(f"no run {run_id}")
            tx.runs[run_id] = session_id
        if session_id != tx.fence.session_id:
            raise LedgerIntegrityError(f"run {run_id} does not belong to the fenced session")
        return tx.fence

    def _facts(self, tx: SqlTx, run_id: str, ids: Sequence[str], *, receipts: bool) -> RunFacts:
        ev = t.agent_run_events.c
        head = tx.conn.execute(select(func.max(ev.sequence)).where(ev.run_id == run_id)).scalar()
        terminal = tx.conn.execute(
            select(ev.sequence).where(ev.run_id == run_id, ev.event_type == "terminal")
        ).first()
        facts = RunFacts(max_sequence=head or 0, has_terminal=terminal is not None)
        if ids:
            for call_id, kind in tx.conn.execute(
                select(ev.call_id, ev.event_type).where(ev.run_id == run_id, ev.call_id.in_(ids))
            ):
                (facts.calls if kind == EventType.TOOL_CALL else facts.results).add(call_id)
            if receipts:
                rc = t.agent_execution_receipts.c
                facts.receipts.update(
                    tx.conn.execute(
                        select(rc.call_id).where(rc.run_id == run_id, rc.call_id.in_(ids))
                    ).scalars()
                )
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
            return session, True
        existing = tx.conn.execute(
            select(t.sessions).where(t.sessions.c.idempotency_key == session.idempotency_key)
        ).one()
        return _session(existing), False

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

    def append_events(self, tx: SqlTx, events: Sequence[Event]) -> None:
        """Insert events under the transaction's fence (rules in ``rules.py``)."""
        if not events:
            return
        run_id = events[0].run_id
        fence = self._require_fence(tx, run_id)
        check_append(self._facts(tx, run_id, call_ids(events), receipts=False), events)
        now = _now()
        tx.conn.execute(
            insert(t.agent_run_events),
            [
                {
                    "run_id": e.run_id,
                    "sequence": e.sequence,
                    "event_type": e.type.value,
                    "call_id": e.call_id,
                    "payload_json": cap_payload(e.payload, self.payload_max_bytes),
                    "epoch": fence.epoch,
                    "created_at": e.created_at or now,
                }
                for e in events
            ],
        )

    def put_receipts(self, tx: SqlTx, receipts: Sequence[ExecutionReceipt]) -> None:
        """Insert receipts; each needs a committed tool_call and no prior receipt."""
        if not receipts:
            return
        run_id = receipts[0].run_id
        if any(r.run_id != run_id for r in receipts):
            raise LedgerIntegrityError("one put_receipts call must hold receipts of one run")
        fence = self._require_fence(tx, run_id)
        facts = self._facts(tx, run_id, sorted({r.call_id for r in receipts}), receipts=True)
        check_receipts(facts, receipts)
        tx.conn.execute(
            insert(t.agent_execution_receipts),
            [
                {
                    "run_id": r.run_id,
                    "call_id": r.call_id,
                    "tool_name": r.tool_name,
                    "status": r.status.value,
                    "input_fingerprint": r.input_fingerprint,
                    "evidence_json": cap_payload(dict(r.evidence), self.payload_max_bytes),
                    "evidence_kind": r.evidence_kind.value,
                    "verification_status": r.verification_status.value,
                    "idempotency_key": r.idempotency_key,
                    "epoch": fence.epoch,
                    "started_at": r.started_at,
                    "finished_at": r.finished_at,
                }
                for r in receipts
            ],
        )

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
            self._conn = self._ledger.engine.connect()
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
