"""Writes of the SQL ledger that are not events: batches, sessions, runs, outbox, epochs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    DateTime,
    bindparam,
    func,
    insert,
    select,
    update,
)

from nahida_workers.core.events import (
    Event,
    FailureCode,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import BatchRecord, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.errors import (
    EventAfterTerminalError,
    NotFoundError,
)
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.pg_commit import open_session_pg
from nahida_workers.ledger.rules import (
    RunFacts,
    storable,
)
from nahida_workers.ledger.sql_base import (
    SqlCore,
    SqlTx,
    conflict_insert,
    session_row,
)
from nahida_workers.ledger.sql_owners import crash_streak_after
from nahida_workers.ports import Fence

__all__ = ["SqlRecords"]

_ob, _s = t.dispatch_outbox.c, t.sessions.c
_MARK_PUBLISHED = (
    update(t.dispatch_outbox)
    .where(_ob.outbox_id == bindparam("b_outbox_id", ""))
    .values(
        published_at=bindparam("b_at", None, type_=DateTime(timezone=True)),
        attempts=_ob.attempts + 1,
    )
)
_BUMP_EPOCH = (
    update(t.sessions)
    .where(_s.session_id == bindparam("b_session_id", ""))
    .values(
        lease_epoch=_s.lease_epoch + 1,
        status=SessionStatus.RUNNING.value,
        updated_at=bindparam("b_at", None, type_=DateTime(timezone=True)),
        crash_streak=crash_streak_after(),
        open_epoch=_s.lease_epoch + 1,
    )
    .returning(_s.lease_epoch)
)
#: The same statements compiled once for the raw PostgreSQL path (``pg_raw.py``).
# The outbox mark is the one commit of a session that may be lost without
# breaking a promise: the outbox is at-least-once (DESIGN.md sections 1 and 4),
# so a mark lost with a server crash only lets the sweeper publish the session
# again, and that duplicate delivery finds the lease held or the session done.
# Its commit therefore does not wait for the WAL flush (``synchronous_commit``
# off for this statement's own transaction only: ``set_config(..., true)`` in
# an InitPlan, evaluated once before the update).  A later durable commit
# flushes it with everything before it.  One WAL flush fewer per dispatch
# (``bench/fleet`` throughput); ``current_setting`` in RETURNING shows the mode it committed in.
_MARK_PUBLISHED_PG = pg_raw.Fixed(
    _MARK_PUBLISHED.where(
        select(func.set_config("synchronous_commit", "off", True)).scalar_subquery().is_not(None)
    ).returning(_ob.outbox_id, func.current_setting("synchronous_commit"))
)
_BUMP_EPOCH_PG = pg_raw.Fixed(_BUMP_EPOCH)
_REOPEN = (
    update(t.sessions)
    .where(
        _s.session_id == bindparam("b_session_id", ""),
        _s.status == SessionStatus.DONE.value,
    )
    .values(
        status=SessionStatus.QUEUED.value,
        updated_at=bindparam("b_at", None, type_=DateTime(timezone=True)),
    )
    .returning(_s.session_id)
)
_REOPEN_PG = pg_raw.Fixed(_REOPEN)


class SqlRecords:
    """Row writes of :class:`~nahida_workers.ledger.sql.SqlLedger`: a part of it.

    Batches, sessions, runs, session status and cancel, the outbox, the
    epoch bump and fleet values.

    Args:
        core: the ledger's core (transactions, fencing, event writes).
    """

    def __init__(self, core: SqlCore) -> None:
        self._core = core

    def create_batch(self, tx: SqlTx, batch: BatchRecord) -> None:
        """Insert a batch row."""
        batch = storable(batch)
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
        session = storable(session)
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
            "priority": session.priority,
            "admission_group": session.admission_group,
        }
        if session.idempotency_key is None:
            tx.conn.execute(insert(t.sessions).values(**values))
            self._created(tx, session)
            return session, True
        dialect_insert = conflict_insert(tx.conn.dialect.name == "postgresql")
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
        return session_row(existing), False

    @staticmethod
    def _created(tx: SqlTx, session: SessionRecord) -> None:
        """The creating transaction holds the new row's lock and its epoch-0 fence."""
        if tx.fence is None and tx.pending is None:
            tx.fence = Fence(session.session_id, session.lease_epoch)

    def create_run(self, tx: SqlTx, run: RunRecord) -> None:
        """Insert a run row."""
        run = storable(run)
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
        self._core.require_fence(tx, run_id)
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
        self,
        tx: SqlTx,
        session_id: str,
        status: SessionStatus,
        *,
        at: datetime,
        only_from: SessionStatus | None = None,
    ) -> None:
        """Set ``sessions.status`` (``only_from``: one conditional UPDATE; see the port)."""
        query = update(t.sessions).where(t.sessions.c.session_id == session_id)
        if only_from is not None:
            query = query.where(t.sessions.c.status == only_from.value)
        tx.conn.execute(query.values(status=status.value, updated_at=at))

    def reopen_session(self, tx: SqlTx, session_id: str, *, at: datetime) -> bool:
        """``done`` -> ``queued`` in ``tx`` (one conditional UPDATE); True when it was done."""
        values = {"b_session_id": session_id, "b_at": at}
        if self._core.pg:  # every steering message runs it: the raw path
            sql, params = _REOPEN_PG.sql, _REOPEN_PG.params(**values)
            return bool(pg_raw.in_transaction(tx.conn, sql, params))
        return tx.conn.execute(_REOPEN, values).first() is not None

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

    def mark_published(self, outbox_id: str, *, at: datetime) -> None:
        """Mark an outbox row published and count the attempt (one statement, its own commit)."""
        if self._core.pg:
            self._core.raw(_MARK_PUBLISHED_PG, b_outbox_id=outbox_id, b_at=at)
            return
        with self._core.single_statement() as conn:
            conn.execute(_MARK_PUBLISHED, {"b_outbox_id": outbox_id, "b_at": at})

    def bump_epoch(self, session_id: str, *, at: datetime) -> int:
        """Increment the fencing epoch in its own commit (one statement); status → running.

        The same statement settles the crash counter (``sql_owners.py``): the
        previous owner, if still open, counts as a crashed delivery unless it
        made progress, and the new owner is open.
        """
        if self._core.pg:
            rows = self._core.raw(_BUMP_EPOCH_PG, b_session_id=session_id, b_at=at)
            row = rows[0] if rows else None
        else:
            with self._core.single_statement() as conn:
                row = conn.execute(_BUMP_EPOCH, {"b_session_id": session_id, "b_at": at}).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        return int(row[0])

    def swap_fleet_value(self, key: str, value: str, *, at: datetime) -> str | None:
        """Store ``value`` under ``key``; return the value it replaced (None if new)."""
        fs = t.fleet_state.c
        with self._core.transaction() as tx:
            old = tx.conn.execute(select(fs.value).where(fs.key == key).with_for_update()).scalar()
            if old is None:
                tx.conn.execute(insert(t.fleet_state).values(key=key, value=value, updated_at=at))
            else:
                tx.conn.execute(
                    update(t.fleet_state).where(fs.key == key).values(value=value, updated_at=at)
                )
        return str(old) if old is not None else None

    def open_session(
        self,
        session: SessionRecord,
        run: RunRecord,
        events: Sequence[Event],
        outbox: OutboxRecord,
    ) -> tuple[SessionRecord, bool]:
        """A new session with its first run, events and outbox row: its own commit.

        On PostgreSQL one autocommit statement (:func:`open_session_pg`).
        Returns the existing session and ``created=False`` when the
        idempotency key is known; nothing is written then.
        """
        if not self._core.pg:
            with self._core.transaction() as tx:
                stored, created = self.create_session(tx, session)
                if created:
                    self.create_run(tx, run)
                    self._core.append(tx, events)
                    self.add_outbox(tx, outbox)
            return stored, created
        with self._core.single_statement_raw() as run_statement:
            created = open_session_pg(
                run_statement,
                {
                    "session_id": session.session_id,
                    "parent_id": session.parent_id,
                    "batch_id": session.batch_id,
                    "workspace": session.workspace,
                    "status": session.status.value,
                    "config": session.config,
                    "idempotency_key": session.idempotency_key,
                    "priority": session.priority,
                    "admission_group": session.admission_group,
                    "at": session.created_at,
                },
                {
                    "run_id": run.run_id,
                    "provider": run.provider,
                    "model": run.model,
                    "contract": run.completion_contract.model_dump(mode="json"),
                    "trace_id": run.trace_id,
                    "started_at": run.started_at,
                },
                [self._core.event_row(e, 0) for e in events],
                {"outbox_id": outbox.outbox_id, "task_name": outbox.task_name},
            )
        if created:
            return session, True
        with self._core.single_statement() as conn:
            existing = conn.execute(
                select(t.sessions).where(t.sessions.c.idempotency_key == session.idempotency_key)
            ).one()
        return session_row(existing), False
