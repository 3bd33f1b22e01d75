"""The session inbox on SQL (DESIGN.md section 8).

Enqueueing is idempotent by message id (``INSERT ... ON CONFLICT DO NOTHING``)
and runs under the session row lock (``FOR NO KEY UPDATE``), so the limits
are checked against a stable count.  Claiming happens in the fenced transaction that commits the
messages as ``user_input`` events; acknowledging in the one that commits the
terminal event.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, bindparam, func, select, update

from nahida_workers.core.records import InboxKind, InboxLimits, InboxMessage, InboxStatus
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.rules import check_inbox, check_inbox_totals, storable
from nahida_workers.ledger.sql_base import ReadScope, SqlCore, SqlTx, conflict_insert, utc

__all__ = ["SqlInbox", "inbox_row"]

_ib = t.session_inbox.c
#: The runtime's read of one status (pending, at every provider boundary), compiled
#: once for the raw PostgreSQL path (``pg_raw.py``).
_INBOX_OF_STATUS_PG = pg_raw.Fixed(
    select(t.session_inbox)
    .where(_ib.session_id == bindparam("session_id", ""), _ib.status == bindparam("status", ""))
    .order_by(_ib.created_at, _ib.message_id)
)


# Enqueueing on the raw PostgreSQL path (``pg_raw.py``): a steering burst is
# this statement sequence per request, and SQLAlchemy Core cost as much client
# CPU as the database spent on it.  The same statements as the SQLite path.
_LOCK_SESSION_PG = pg_raw.Fixed(
    select(t.sessions.c.session_id)
    .where(t.sessions.c.session_id == bindparam("session_id", ""))
    .with_for_update(key_share=True)
)
#: (existing message id or NULL, pending messages of the kind, pending steering bytes).
_INBOX_STATE_PG = pg_raw.Fixed(
    select(
        select(_ib.message_id)
        .where(_ib.message_id == bindparam("message_id", ""))
        .scalar_subquery(),
        func.count().filter(_ib.kind == bindparam("kind", "")),
        func.coalesce(func.sum(_ib.size_bytes).filter(_ib.kind == InboxKind.USER.value), 0),
    ).where(
        _ib.session_id == bindparam("session_id", ""),
        _ib.status == InboxStatus.PENDING.value,
    )
)


@functools.cache
def _enqueue_pg() -> pg_raw.Fixed:
    """The enqueue INSERT, built on first use.

    The PostgreSQL dialect is imported then: the SQLite-only CLI never loads
    it (``bench/cli_startup``).
    """
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    return pg_raw.Fixed(
        pg_insert(t.session_inbox)
        .values(
            message_id=bindparam("message_id", ""),
            session_id=bindparam("session_id", ""),
            kind=bindparam("kind", ""),
            text=bindparam("text", ""),
            size_bytes=bindparam("size_bytes", 0),
            status=InboxStatus.PENDING.value,
            next_turn=bindparam("next_turn", False),
            created_at=bindparam("created_at", None, type_=DateTime(timezone=True)),
        )
        .on_conflict_do_nothing(index_elements=["message_id"])
        .returning(_ib.message_id)
    )


def inbox_row(row: Any) -> InboxMessage:
    """Map a ``session_inbox`` row."""
    return InboxMessage(
        message_id=row.message_id,
        session_id=row.session_id,
        kind=InboxKind(row.kind),
        text=row.text,
        size_bytes=row.size_bytes,
        status=InboxStatus(row.status),
        next_turn=bool(row.next_turn),
        created_at=utc(row.created_at),
        claimed_at=utc(row.claimed_at),
        claimed_run_id=row.claimed_run_id,
        acknowledged_at=utc(row.acknowledged_at),
    )


class SqlInbox:
    """The inbox part of :class:`~nahida_workers.ledger.sql.SqlLedger` (``LedgerInbox``).

    Args:
        core: the ledger's core (fencing, the read engine).
    """

    def __init__(self, core: SqlCore) -> None:
        self._core = core

    def enqueue_inbox(
        self, tx: SqlTx, message: InboxMessage, limits: InboxLimits
    ) -> tuple[InboxMessage, bool]:
        """Add a pending message, or return the one already holding its id.

        Raises:
            NotFoundError: no such session.
            InboxFullError: the pending inbox is at a limit; nothing was written.
        """
        message = storable(message)
        if self._core.pg:
            return self._enqueue_pg(tx, message, limits)
        ib = t.session_inbox.c
        # FOR NO KEY UPDATE (SQLite: the write lock): enqueues and status
        # changes of the session still serialise, but a row that only
        # references the session (an outbox row, an event) is not blocked:
        # FOR UPDATE conflicts with the KEY SHARE lock a foreign-key insert
        # takes, and a steering burst queued every redispatch behind it.
        locked = tx.conn.execute(
            select(t.sessions.c.session_id)
            .where(t.sessions.c.session_id == message.session_id)
            .with_for_update(key_share=True)
        ).first()
        if locked is None:
            raise NotFoundError(f"no session {message.session_id}")
        existing = tx.conn.execute(
            select(t.session_inbox).where(ib.message_id == message.message_id)
        ).first()
        if existing is not None:
            return inbox_row(existing), False
        pending = tx.conn.execute(
            select(ib.kind, ib.size_bytes).where(
                ib.session_id == message.session_id, ib.status == InboxStatus.PENDING.value
            )
        ).all()
        check_inbox([(k, n) for k, n in pending], message.kind.value, message.size_bytes, limits)
        insert = conflict_insert(self._core.pg)
        tx.conn.execute(
            insert(t.session_inbox)
            .values(
                message_id=message.message_id,
                session_id=message.session_id,
                kind=message.kind.value,
                text=message.text,
                size_bytes=message.size_bytes,
                status=InboxStatus.PENDING.value,
                next_turn=message.next_turn,
                created_at=message.created_at,
            )
            .on_conflict_do_nothing(index_elements=["message_id"])
        )
        return message, True

    def _enqueue_pg(
        self, tx: SqlTx, message: InboxMessage, limits: InboxLimits
    ) -> tuple[InboxMessage, bool]:
        """:meth:`enqueue_inbox` on PostgreSQL: three fixed statements, the lock first.

        The lock is its own statement: a statement that waited for it would
        count the pending messages in the snapshot it took before the wait.
        """

        def run(fixed: pg_raw.Fixed, **values: Any) -> list[tuple[Any, ...]]:
            return pg_raw.in_transaction(tx.conn, fixed.sql, fixed.params(**values))

        sid, mid, kind = message.session_id, message.message_id, message.kind.value
        if not run(_LOCK_SESSION_PG, session_id=sid):
            raise NotFoundError(f"no session {sid}")
        (existing, count, used), *_ = run(
            _INBOX_STATE_PG, message_id=mid, kind=kind, session_id=sid
        )
        if existing is not None:
            row = tx.conn.execute(select(t.session_inbox).where(_ib.message_id == mid)).one()
            return inbox_row(row), False
        check_inbox_totals(int(count), int(used), kind, message.size_bytes, limits)
        run(
            _enqueue_pg(),
            message_id=mid,
            session_id=sid,
            kind=kind,
            text=message.text,
            size_bytes=message.size_bytes,
            next_turn=message.next_turn,
            created_at=message.created_at,
        )
        return message, True

    def claim_inbox(
        self, tx: SqlTx, run_id: str, message_ids: Sequence[str], *, at: datetime
    ) -> None:
        """Mark pending messages of the fenced session claimed by ``run_id``.

        Raises:
            LedgerIntegrityError: a message is not pending or not this session's.
        """
        if not message_ids:
            return
        fence = self._core.require_fence(tx, run_id)
        ib = t.session_inbox.c
        result = tx.conn.execute(
            update(t.session_inbox)
            .where(
                ib.message_id.in_(list(message_ids)),
                ib.session_id == fence.session_id,
                ib.status == InboxStatus.PENDING.value,
            )
            .values(status=InboxStatus.CLAIMED.value, claimed_at=at, claimed_run_id=run_id)
        )
        if result.rowcount != len(set(message_ids)):
            raise LedgerIntegrityError("inbox messages are not pending for this session")

    def acknowledge_inbox(self, tx: SqlTx, run_id: str, *, at: datetime) -> int:
        """Acknowledge every message ``run_id`` claimed; returns how many."""
        self._core.require_fence(tx, run_id)
        ib = t.session_inbox.c
        result = tx.conn.execute(
            update(t.session_inbox)
            .where(ib.claimed_run_id == run_id, ib.status == InboxStatus.CLAIMED.value)
            .values(status=InboxStatus.ACKNOWLEDGED.value, acknowledged_at=at)
        )
        return int(result.rowcount)

    def inbox(
        self, session_id: str, *, statuses: Sequence[InboxStatus] | None = None
    ) -> list[InboxMessage]:
        """A session's inbox messages, oldest first."""
        if self._core.pg and statuses is not None and len(statuses) == 1:
            rows = self._core.raw(
                _INBOX_OF_STATUS_PG, session_id=session_id, status=statuses[0].value
            )
            return [inbox_row(r) for r in rows]
        ib = t.session_inbox.c
        query = (
            select(t.session_inbox)
            .where(ib.session_id == session_id)
            .order_by(ib.created_at, ib.message_id)
        )
        if statuses is not None:
            query = query.where(ib.status.in_([s.value for s in statuses]))
        with ReadScope(self._core.reader) as conn:
            return [inbox_row(r) for r in conn.execute(query).all()]
