"""The control-fact port on the SQL ledger (``ports.ControlLedger``, DESIGN.md section 8).

Composed over a :class:`~nahida_workers.ledger.sql.SqlLedger`; writes run in
its transactions.  :meth:`SqlControl.fence_unowned` locks the session row
(``FOR UPDATE``, SQLite: ``BEGIN IMMEDIATE``) and bumps its epoch, exactly as
an owner's take-over does, so every later write of the transaction is
fenced like an owner's.  A timer fires by a conditional update of its
``fired_at``: a second beat waits for the first's row lock and then finds
the row fired (READ COMMITTED re-checks the condition).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.facts import Timer, may_seal
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope, SqlTx, conflict_insert, utc
from nahida_workers.ports import Fence

__all__ = ["SqlControl"]


def _timer(row: Any) -> Timer:
    return Timer(
        timer_id=row.timer_id,
        session_id=row.session_id,
        root_id=row.root_id,
        kind=row.kind,
        due_at=utc(row.due_at),  # type: ignore[arg-type]
        created_at=utc(row.created_at),  # type: ignore[arg-type]
        payload=dict(row.payload_json or {}),
        fired_at=utc(row.fired_at),
        outcome=row.outcome,
    )


class SqlControl:
    """Fences and timers on a SQL ledger (see :class:`nahida_workers.ports.ControlLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    def fence_unowned(
        self, tx: SqlTx, session_id: str, *, lease_free: bool, at: datetime
    ) -> Fence | None:
        """Bump the epoch of a session no worker holds and fence ``tx`` with it."""
        s = t.sessions.c
        row = tx.conn.execute(
            select(s.status, s.open_epoch, s.lease_epoch)
            .where(s.session_id == session_id)
            .with_for_update()
        ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        if not may_seal(SessionStatus(row.status), row.open_epoch, lease_free=lease_free):
            return None
        epoch = int(row.lease_epoch) + 1
        tx.conn.execute(
            update(t.sessions)
            .where(s.session_id == session_id)
            .values(lease_epoch=epoch, updated_at=at)
        )
        # The row is locked (FOR UPDATE above) and its epoch is ours now.
        tx.pending = None
        tx.fence = Fence(session_id, epoch)
        tx.cancel_requested = False
        tx.pending_inbox = 0
        return tx.fence

    def flag_cancel(self, tx: SqlTx, session_id: str, *, at: datetime) -> bool:
        """The cancel flag, unless the session is done (one conditional update)."""
        s = t.sessions.c
        found = tx.conn.execute(
            select(s.status).where(s.session_id == session_id).with_for_update()
        ).first()
        if found is None:
            raise NotFoundError(f"no session {session_id}")
        if found.status == SessionStatus.DONE.value:
            return False
        self.ledger.request_cancel(tx, session_id, at=at)
        return True

    def cancel_flags(self, tx: SqlTx, session_ids: Sequence[str]) -> dict[str, tuple[bool, bool]]:
        """``(cancel requested, parent_close is cancel)`` per known session, read in ``tx``."""
        if not session_ids:
            return {}
        s = t.sessions.c
        rows = tx.conn.execute(
            select(s.session_id, s.cancel_requested_at, s.config_json).where(
                s.session_id.in_(list(session_ids))
            )
        ).all()
        return {
            r.session_id: (
                r.cancel_requested_at is not None,
                str((r.config_json or {}).get("parent_close", "cancel")) == "cancel",
            )
            for r in rows
        }

    def set_timer(self, tx: SqlTx, timer: Timer) -> None:
        """Arm ``timer``: insert, or re-arm its row (due, payload, not fired)."""
        values = {
            "timer_id": timer.timer_id,
            "session_id": timer.session_id,
            "root_id": timer.root_id,
            "kind": timer.kind,
            "due_at": timer.due_at,
            "payload_json": timer.payload,
            "created_at": timer.created_at,
            "fired_at": None,
            "outcome": None,
        }
        insert = conflict_insert(self.ledger.pg)(t.session_timers).values(**values)
        rearm = {k: v for k, v in values.items() if k not in ("timer_id", "session_id", "root_id")}
        tx.conn.execute(insert.on_conflict_do_update(index_elements=["timer_id"], set_=rearm))

    def fire_timer(self, tx: SqlTx, timer_id: str, *, outcome: str, at: datetime) -> bool:
        """Compare-and-set ``fired_at``; False when another firing won."""
        c = t.session_timers.c
        fired = tx.conn.execute(
            update(t.session_timers)
            .where(c.timer_id == timer_id, c.fired_at.is_(None))
            .values(fired_at=at, outcome=outcome)
            .returning(c.timer_id)
        ).first()
        return fired is not None

    def due_timers(self, *, now: datetime, limit: int = 100) -> list[Timer]:
        """Armed timers due at ``now``, earliest first."""
        c = t.session_timers.c
        query = (
            select(t.session_timers)
            .where(c.fired_at.is_(None), c.due_at <= now)
            .order_by(c.due_at, c.timer_id)
            .limit(limit)
        )
        with ReadScope(self.ledger.reader) as conn:
            return [_timer(r) for r in conn.execute(query).all()]

    def timers(self, session_id: str) -> list[Timer]:
        """Every timer of ``session_id``, earliest due first."""
        c = t.session_timers.c
        query = (
            select(t.session_timers)
            .where(c.session_id == session_id)
            .order_by(c.due_at, c.timer_id)
        )
        with ReadScope(self.ledger.reader) as conn:
            return [_timer(r) for r in conn.execute(query).all()]
