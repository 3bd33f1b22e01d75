"""Reads of the SQL ledger (autocommit on PostgreSQL, deferred on SQLite)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    bindparam,
    func,
    select,
)

from nahida_workers.core.event_payloads import PayloadModel, parse_payload
from nahida_workers.core.events import (
    Event,
    EventType,
    ExecutionReceipt,
    SessionStatus,
)
from nahida_workers.core.records import BatchRecord, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.errors import StoredPayloadError
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.rules import (
    RunFacts,
    record_events,
)
from nahida_workers.ledger.sql_base import (
    ReadScope,
    SqlCore,
    batch_row,
    run_row,
    session_row,
    utc,
)
from nahida_workers.ports import Fence

__all__ = ["SqlReads"]

_GET_SESSION = select(t.sessions).where(t.sessions.c.session_id == bindparam("session_id", ""))
_RUNS_OF = (
    select(t.agent_runs)
    .where(t.agent_runs.c.session_id == bindparam("session_id", ""))
    .order_by(t.agent_runs.c.started_at, t.agent_runs.c.run_id)
)
_EVENTS = (
    select(t.agent_run_events)
    .where(t.agent_run_events.c.run_id == bindparam("run_id", ""))
    .order_by(t.agent_run_events.c.sequence)
)
_RECEIPTS = (
    select(t.agent_execution_receipts)
    .where(t.agent_execution_receipts.c.run_id == bindparam("run_id", ""))
    .order_by(t.agent_execution_receipts.c.receipt_id)
)
#: The hot reads compiled once for the raw PostgreSQL path (``pg_raw.py``).
_PG = {
    name: pg_raw.Fixed(q)
    for name, q in [
        ("session", _GET_SESSION),
        ("runs", _RUNS_OF),
        ("events", _EVENTS),
        ("receipts", _RECEIPTS),
    ]
}


class SqlReads:
    """The reads part of :class:`~nahida_workers.ledger.sql.SqlLedger` (``LedgerReader``).

    Args:
        core: the ledger's core (its read engine, and where ``load_run`` carries facts).
    """

    def __init__(self, core: SqlCore) -> None:
        self._core = core

    def _read(self) -> ReadScope:
        return ReadScope(self._core.reader)

    def _rows(self, name: str, query: Any, **values: Any) -> list[Any]:
        """Rows of a hot read: raw psycopg on PostgreSQL, SQLAlchemy on SQLite."""
        if self._core.pg:
            return self._core.raw(_PG[name], **values)
        with self._read() as conn:
            return list(conn.execute(query, values).all())

    def load_run(self, fence: Fence, run_id: str) -> tuple[list[Event], list[ExecutionReceipt]]:
        """A new owner's read of its run: every event and receipt.

        Called after :meth:`bump_epoch`: everything earlier owners committed is
        visible, and nobody else can write the run under this epoch, so the
        facts read here are carried to the owner's first commit point.
        """
        events = self.events(run_id)
        # A receipt needs its committed tool_call (rules.check_receipts): a run
        # without one has no receipts, and the read is skipped.
        has_calls = any(e.type is EventType.TOOL_CALL for e in events)
        receipts = self.receipts(run_id) if has_calls else []
        facts = RunFacts(max_sequence=events[-1].sequence if events else 0)
        record_events(facts, events)
        facts.receipts.update(r.call_id for r in receipts)
        if self._core.pg:
            self._core.carry((fence.session_id, fence.epoch, run_id), facts)
        return events, receipts

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session row or None."""
        rows = self._rows("session", _GET_SESSION, session_id=session_id)
        return session_row(rows[0]) if rows else None

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run row or None."""
        with self._read() as conn:
            row = conn.execute(select(t.agent_runs).where(t.agent_runs.c.run_id == run_id)).first()
        return None if row is None else run_row(row)

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        return [run_row(r) for r in self._rows("runs", _RUNS_OF, session_id=session_id)]

    def events(self, run_id: str) -> list[Event]:
        """Events of a run by sequence."""
        rows = self._rows("events", _EVENTS, run_id=run_id)
        return [
            Event(
                run_id=r.run_id,
                sequence=r.sequence,
                type=EventType(r.event_type),
                payload=stored_payload(r.event_type, r.payload_json, r.run_id, r.sequence),
                call_id=r.call_id,
                epoch=r.epoch,
                created_at=utc(r.created_at),
            )
            for r in rows
        ]

    def receipts(self, run_id: str) -> list[ExecutionReceipt]:
        """Receipts of a run in the order they were written."""
        rows = self._rows("receipts", _RECEIPTS, run_id=run_id)
        return [
            ExecutionReceipt(
                run_id=r.run_id,
                call_id=r.call_id,
                tool_name=r.tool_name,
                status=r.status,
                started_at=utc(r.started_at),
                finished_at=utc(r.finished_at),
                input_fingerprint=r.input_fingerprint,
                evidence=r.evidence_json,
                evidence_kind=r.evidence_kind,
                verification_status=r.verification_status,
                idempotency_key=r.idempotency_key,
                epoch=r.epoch,
            )
            for r in rows
        ]

    def session_counts(self) -> dict[SessionStatus, tuple[int, datetime | None]]:
        """Per status: how many sessions, and the oldest ``updated_at`` (one grouped query)."""
        s = t.sessions.c
        query = select(s.status, func.count(), func.min(s.updated_at)).group_by(s.status)
        with self._read() as conn:
            return {
                SessionStatus(status): (int(n), utc(oldest))
                for status, n, oldest in conn.execute(query).all()
            }

    def quiet_sessions(self, *, older_than: datetime) -> list[str]:
        """Unfinished sessions whose open run has written nothing since ``older_than``."""
        s, r, e = t.sessions.c, t.agent_runs.c, t.agent_run_events.c
        recent = select(e.event_id).where(e.run_id == r.run_id, e.created_at >= older_than).exists()
        query = (
            select(s.session_id)
            .join(t.agent_runs, (r.session_id == s.session_id) & r.terminal_state.is_(None))
            .where(
                s.status.in_([SessionStatus.QUEUED.value, SessionStatus.RUNNING.value]),
                r.started_at < older_than,
                ~recent,
            )
            .order_by(s.session_id)
        )
        with self._read() as conn:
            return list(conn.execute(query).scalars())

    def sessions(
        self,
        *,
        batch_id: str | None = None,
        statuses: Sequence[SessionStatus] | None = None,
        updated_before: datetime | None = None,
    ) -> list[SessionRecord]:
        """Sessions, optionally by batch, status and last change, oldest first."""
        s = t.sessions.c
        query = select(t.sessions).order_by(s.created_at, s.session_id)
        if batch_id is not None:
            query = query.where(s.batch_id == batch_id)
        if statuses is not None:
            query = query.where(s.status.in_([st.value for st in statuses]))
        if updated_before is not None:
            query = query.where(s.updated_at < updated_before)
        with self._read() as conn:
            return [session_row(r) for r in conn.execute(query).all()]

    def batches(self) -> list[BatchRecord]:
        """All batches, newest first."""
        b = t.batches.c
        with self._read() as conn:
            rows = conn.execute(select(t.batches).order_by(b.created_at.desc())).all()
        return [batch_row(r) for r in rows]

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch or None."""
        with self._read() as conn:
            row = conn.execute(select(t.batches).where(t.batches.c.batch_id == batch_id)).first()
        return None if row is None else batch_row(row)

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
                created_at=utc(r.created_at),
                published_at=utc(r.published_at),
                attempts=r.attempts,
            )
            for r in rows
        ]


def stored_payload(event_type: str, data: Any, run_id: str, sequence: int) -> PayloadModel:
    """The validated payload model of a stored row (the read edge, DESIGN.md section 2).

    Raises:
        StoredPayloadError: the row's payload does not have its type's shape.
    """
    try:
        return parse_payload(event_type, data)
    except (ValidationError, KeyError) as exc:
        raise StoredPayloadError(
            f"event {run_id}#{sequence}: {event_type} payload has the wrong shape: {exc}"
        ) from None
