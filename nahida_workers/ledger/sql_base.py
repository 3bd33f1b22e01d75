"""Plumbing of the SQL ledger: engines, the transaction object, row mapping.

See :mod:`nahida_workers.ledger.sql` for the ledger itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
)
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    NotSupportedError,
    ProgrammingError,
    StatementError,
)
from sqlalchemy.pool import NullPool

from nahida_workers.core.events import (
    CompletionContract,
    Event,
    ExecutionReceipt,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import STORED_ROW, BatchRecord, RunRecord, SessionRecord
from nahida_workers.errors import (
    DuplicateResultError,
    DuplicateSequenceError,
    EventAfterTerminalError,
    LedgerDataError,
    LedgerError,
    LedgerIntegrityError,
    LedgerUnavailableError,
    StaleEpochError,
)
from nahida_workers.ledger.rules import (
    RunFacts,
)
from nahida_workers.ports import Fence

if TYPE_CHECKING:
    from nahida_workers.ledger import pg_raw

__all__ = [
    "ReadScope",
    "SqlCore",
    "SqlTx",
    "batch_row",
    "check_epoch",
    "conflict_insert",
    "database_error",
    "integrity",
    "make_engine",
    "now",
    "run_row",
    "session_row",
    "utc",
]


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    max_overflow: int | None = None,
    pool_timeout_s: float = 30.0,
    statement_timeout_ms: int = 0,
    lock_timeout_ms: int = 0,
) -> Engine:
    """An engine for ``url`` with the settings the ledger relies on.

    SQLite: WAL, a 30 s busy timeout, connections shared across threads and
    ``BEGIN IMMEDIATE`` so writers serialise at the start of a transaction.
    PostgreSQL: a pool without pre-ping (see below).

    Args:
        url: SQLAlchemy URL.
        pool_size: PostgreSQL connections kept open.
        max_overflow: connections opened over ``pool_size`` when all are in
            use (default: ``pool_size`` more).
        pool_timeout_s: longest wait for a connection when ``pool_size +
            max_overflow`` are in use; then ``sqlalchemy.exc.TimeoutError``.
        statement_timeout_ms / lock_timeout_ms: PostgreSQL's
            ``statement_timeout`` and ``lock_timeout`` for every connection
            (0 = the server's default, none); past them the statement fails
            (``QueryCanceled`` / ``LockNotAvailable``: LedgerUnavailableError).
    """
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    # No pre-ping: it costs a round trip per transaction.  A connection the
    # server dropped fails its statement, SQLAlchemy invalidates the pool, and
    # the caller sees LedgerUnavailableError (retryable); the next checkout
    # connects afresh.
    timeouts = {"statement_timeout": statement_timeout_ms, "lock_timeout": lock_timeout_ms}
    options = " ".join(f"-c {name}={ms}" for name, ms in timeouts.items() if ms)
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_timeout=pool_timeout_s,
        pool_recycle=3600,
        connect_args={"options": options} if options else {},
    )


def _sqlite_engine(url: str) -> Engine:
    """:func:`make_engine` for SQLite: WAL, a busy timeout, ``BEGIN IMMEDIATE`` writers."""
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


def conflict_insert(pg: bool) -> Any:
    """The dialect's ``insert`` construct (the one with ``on_conflict_do_nothing``).

    Imported on first use: ``sqlalchemy.dialects.postgresql`` loads every
    PostgreSQL driver module, which a process on SQLite (``nahida status
    --local``) never needs (CLI start-up <= 0.5 s).
    """
    if pg:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime (SQLite returns naive ones), or None."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def now() -> datetime:
    """The database-side fallback timestamp for a row written without one (UTC)."""
    return datetime.now(UTC)


def check_epoch(session_id: str, writer: int, current: int) -> None:
    """Raise :class:`StaleEpochError` unless ``writer`` is the session's ``current`` epoch."""
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
        self.pending_inbox = 0  # pending next-turn inbox messages, read with the lock
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


def integrity(exc: IntegrityError) -> LedgerIntegrityError:
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


def unavailable(exc: DBAPIError) -> LedgerUnavailableError:
    r"""The typed outage error for a driver error: its class and first 200 characters.

    The driver's message names the host, port, database and user -- never a
    password -- so it is kept: "database \"nahida\" does not exist" is the fix.
    """
    detail = " ".join(str(exc.orig).split())[:200]
    return LedgerUnavailableError(f"ledger unavailable: {type(exc.orig).__name__}: {detail}")


def database_error(exc: StatementError) -> LedgerError:
    """The typed error for a database error: an outage, or a refused value.

    A refused value -- ``DataError`` (a string too long for its column, a NUL,
    an untranslatable character), ``ProgrammingError``, ``NotSupportedError``,
    or a value the driver could not even encode -- fails the same way every
    time: :class:`LedgerDataError`, never retried.  Anything else (a dropped
    connection, a server shutting down, a failed commit) is
    :class:`LedgerUnavailableError`, retried (DESIGN.md section 2).
    """
    refused = (DataError, ProgrammingError, NotSupportedError)
    if isinstance(exc, DBAPIError) and not isinstance(exc, refused):
        return unavailable(exc)
    cause = exc.orig if exc.orig is not None else exc
    detail = " ".join(str(cause).split())[:200]
    return LedgerDataError(f"ledger refused a value: {type(cause).__name__}: {detail}")


class ReadScope:
    """A read-only connection scope that maps outages to LedgerUnavailableError."""

    def __init__(self, reader: Engine) -> None:
        self._reader = reader
        self._conn: Connection | None = None

    def __enter__(self) -> Connection:
        try:
            self._conn = self._reader.connect()
        except DBAPIError as exc:
            raise database_error(exc) from exc
        return self._conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._conn is not None
        try:
            self._conn.close()
        finally:
            if isinstance(exc, StatementError):
                raise database_error(exc) from exc


def session_row(row: Any) -> SessionRecord:
    """A ``SessionRecord`` from a database row (its config not cleaned again)."""
    return SessionRecord.model_validate(
        dict(
            session_id=row.session_id,
            parent_id=row.parent_id,
            batch_id=row.batch_id,
            workspace=row.workspace,
            status=SessionStatus(row.status),
            lease_epoch=row.lease_epoch,
            config=row.config_json,
            idempotency_key=row.idempotency_key,
            created_at=utc(row.created_at),
            updated_at=utc(row.updated_at),
            cancel_requested_at=utc(row.cancel_requested_at),
            open_epoch=row.open_epoch,
            crash_streak=row.crash_streak or 0,
            priority=row.priority,
            admission_group=row.admission_group,
            admission=row.admission,
        ),
        context={STORED_ROW: True},
    )


def run_row(row: Any) -> RunRecord:
    """A ``RunRecord`` from a database row."""
    return RunRecord(
        run_id=row.run_id,
        session_id=row.session_id,
        provider=row.provider,
        model=row.model,
        completion_contract=CompletionContract.model_validate(row.completion_contract_json),
        trace_id=row.trace_id,
        started_at=utc(row.started_at),
        ended_at=utc(row.ended_at),
        terminal_state=TerminalState(row.terminal_state) if row.terminal_state else None,
        terminal_reason=ReasonCode(row.terminal_reason) if row.terminal_reason else None,
        failure_code=FailureCode(row.failure_code) if row.failure_code else None,
    )


def batch_row(row: Any) -> BatchRecord:
    """A ``BatchRecord`` from a database row."""
    return BatchRecord(
        batch_id=row.batch_id,
        job_name=row.job_name,
        created_at=utc(row.created_at),
        spec=row.spec_json,
    )


class SqlCore(Protocol):
    """What the SQL ledger's parts use of its core (``sql.py``: transactions, fencing).

    The parts (``sql_records.py``, ``sql_reads.py``, ``sql_inbox.py``,
    ``sql_owners.py``) hold the core; they never inherit from it.

    Attributes:
        engine: the write engine.
        reader: the read engine (autocommit on PostgreSQL).
        pg: whether the database is PostgreSQL (one-statement commit points).
    """

    engine: Engine
    reader: Engine
    pg: bool

    def transaction(
        self, *, fence: Fence | None = None, run_id: str | None = None
    ) -> AbstractContextManager[SqlTx]:
        """A transaction, fenced when ``fence`` is given (``SqlLedger.transaction``)."""
        ...

    def single_statement(self) -> AbstractContextManager[Connection]:
        """A connection for a write that is one statement (autocommit on PostgreSQL)."""
        ...

    def raw(self, fixed: pg_raw.Fixed, **values: Any) -> list[Any]:
        """Rows of a fixed statement run alone, on the raw psycopg path (PostgreSQL only)."""
        ...

    def single_statement_raw(self) -> AbstractContextManager[pg_raw.Runner]:
        """A runner for fixed statements that are each their own commit (PostgreSQL only)."""
        ...

    def require_fence(self, tx: SqlTx, run_id: str, *, locks_itself: bool = False) -> Fence:
        """The fence a write to ``run_id`` runs under (checked)."""
        ...

    def append(
        self, tx: SqlTx, events: Sequence[Event], receipts: Sequence[ExecutionReceipt] = ()
    ) -> None:
        """Events then receipts of one run, checked (``SqlLedger.append``)."""
        ...

    def event_row(self, e: Event, epoch: int) -> dict[str, Any]:
        """The ``agent_run_events`` row of ``e`` written at ``epoch``."""
        ...

    def carry(self, key: Any, facts: RunFacts | None) -> None:
        """Keep (or forget) an owner's run facts for its next commit point."""
        ...
