"""The child-session port on the SQL ledger (``ports.ChildLedger``, DESIGN.md section 8).

Composed over a :class:`~nahida_workers.ledger.sql.SqlLedger`; writes run in
its transactions.  Lock order is always child before ancestor (a child's
seal locks its own row, then its parent's; a spawn holds the parent's fence,
then locks the root), so the locks never form a cycle.  The per-root limit
is a conditional ``INSERT ... SELECT ... WHERE (count) < max`` taken under
the root's row lock, so two parents of one tree cannot both pass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, literal, select, update

from nahida_workers.core.events import Event, SessionStatus
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.records import (
    InboxLimits,
    InboxMessage,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.errors import LedgerIntegrityError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.rules import storable
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope, SqlTx, session_row

__all__ = ["SqlChildren"]

#: A completion a parent waits on is never refused for space (its wait must end).
_UNBOUNDED = InboxLimits(max_user=10**9, max_background=10**9, max_bytes=10**15)


class SqlChildren:
    """Child sessions on a SQL ledger (see :class:`nahida_workers.ports.ChildLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    def spawn_child(
        self,
        tx: SqlTx,
        child: SessionRecord,
        link: ChildLink,
        run: RunRecord,
        prompt: Event,
        outbox: OutboxRecord | None,
        limits: ChildLimits,
    ) -> SpawnOutcome:
        """Insert a child with its first run, prompt and outbox row, or refuse (limits)."""
        child = storable(child)
        s = t.sessions.c
        conn = tx.conn
        if conn.execute(select(s.session_id).where(s.session_id == child.session_id)).first():
            return SpawnOutcome.EXISTS
        if link.depth > limits.max_depth:
            return SpawnOutcome.REFUSED_DEPTH
        siblings = conn.execute(
            select(func.count()).select_from(t.sessions).where(s.parent_id == link.parent_id)
        ).scalar_one()
        if siblings >= limits.max_per_session:
            return SpawnOutcome.REFUSED_COUNT
        conn.execute(select(s.session_id).where(s.session_id == link.root_id).with_for_update())
        if not self._insert_within_root_limit(conn, child, link, limits.max_running_per_root):
            return SpawnOutcome.REFUSED_RUNNING
        self.ledger.create_run(tx, run)
        conn.execute(insert(t.agent_run_events).values(**self.ledger.event_row(prompt, 0)))
        tx.facts.pop(run.run_id, None)  # the prompt is in: a later write reads the run's facts
        if outbox is not None:
            self.ledger.add_outbox(tx, outbox)
        return SpawnOutcome.CREATED

    @staticmethod
    def _insert_within_root_limit(
        conn: Any, child: SessionRecord, link: ChildLink, max_running: int
    ) -> bool:
        """The conditional insert: the row lands only while the tree is under its limit."""
        s = t.sessions.c
        values: dict[str, Any] = {
            "session_id": child.session_id,
            "parent_id": link.parent_id,
            "batch_id": child.batch_id,
            "workspace": child.workspace,
            "status": child.status.value,
            "lease_epoch": 0,
            "config_json": child.config,
            "created_at": child.created_at,
            "updated_at": child.updated_at,
            "crash_streak": 0,
            "priority": child.priority,
            "admission_group": child.admission_group,
            "root_id": link.root_id,
            "depth": link.depth,
            "lineage_json": link.lineage,
        }
        running = (
            select(func.count())
            .select_from(t.sessions)
            .where(s.root_id == link.root_id, s.status != SessionStatus.DONE.value)
            .scalar_subquery()
        )
        columns = [getattr(s, k) for k in values]
        row = select(
            *[literal(v, type_=c.type) for v, c in zip(values.values(), columns, strict=True)]
        )
        # RETURNING, not rowcount: psycopg may report -1 for INSERT ... SELECT.
        inserted = conn.execute(
            insert(t.sessions)
            .from_select(list(values), row.where(running < max_running))
            .returning(s.session_id)
        ).first()
        return inserted is not None

    def post_child_completion(
        self, tx: SqlTx, message: InboxMessage, outbox: OutboxRecord, *, at: datetime
    ) -> bool:
        """The completion into the parent's inbox; wake a ``waiting`` parent (returns True).

        The parent is woken only when every child it awaits is done: its next
        step needs all their results (adopted in call order), so a wake per
        child would only park it again.  The parent row is locked first, so
        of two children sealing at once the second sees the first done
        (READ COMMITTED: each statement after the lock reads what committed).
        """
        self.ledger.enqueue_inbox(tx, message, _UNBOUNDED)  # locks the parent row
        s = t.sessions.c
        parent = tx.conn.execute(
            select(s.status, s.awaiting_json).where(s.session_id == message.session_id)
        ).first()
        if parent is None or parent.status != SessionStatus.WAITING.value:
            return False
        awaiting = [str(a) for a in (parent.awaiting_json or ())]
        if awaiting:
            done = tx.conn.execute(
                select(func.count())
                .select_from(t.sessions)
                .where(s.session_id.in_(awaiting), s.status == SessionStatus.DONE.value)
            ).scalar_one()
            if done < len(set(awaiting)):
                return False  # the last awaited child to finish wakes it
        woke = tx.conn.execute(
            update(t.sessions)
            .where(s.session_id == message.session_id, s.status == SessionStatus.WAITING.value)
            .values(status=SessionStatus.QUEUED.value, updated_at=at)
            .returning(s.session_id)
        ).first()
        if woke is None:
            return False
        self.ledger.add_outbox(tx, outbox)
        return True

    def park(self, tx: SqlTx, session_id: str, awaiting: Sequence[str], *, at: datetime) -> bool:
        """``waiting`` with ``awaiting`` recorded, iff an awaited child is not done."""
        if tx.fence is None or tx.fence.session_id != session_id:
            raise LedgerIntegrityError("park needs the session's own fence")
        s = t.sessions.c
        done = tx.conn.execute(
            select(func.count())
            .select_from(t.sessions)
            .where(s.session_id.in_(list(awaiting)), s.status == SessionStatus.DONE.value)
        ).scalar_one()
        if done >= len(set(awaiting)):
            return False
        parked = tx.conn.execute(
            update(t.sessions)
            .where(s.session_id == session_id, s.cancel_requested_at.is_(None))
            .values(status=SessionStatus.WAITING.value, awaiting_json=list(awaiting), updated_at=at)
        )
        return parked.rowcount == 1  # a cancel is never parked on (ports.ChildLedger.park)

    def link(self, session_id: str) -> ChildLink | None:
        """A session's place in its tree (a top-level session is its own root)."""
        s = t.sessions.c
        with ReadScope(self.ledger.reader) as conn:
            row = conn.execute(
                select(s.parent_id, s.root_id, s.depth, s.lineage_json, s.awaiting_json).where(
                    s.session_id == session_id
                )
            ).first()
        if row is None:
            return None
        return ChildLink(
            session_id,
            row.parent_id,
            row.root_id or session_id,
            row.depth or 0,
            dict(row.lineage_json or {}),
            tuple(row.awaiting_json or ()),
        )

    def children(self, parent_id: str) -> list[SessionRecord]:
        """The children of a session, oldest first."""
        s = t.sessions.c
        with ReadScope(self.ledger.reader) as conn:
            rows = conn.execute(
                select(t.sessions)
                .where(s.parent_id == parent_id)
                .order_by(s.created_at, s.session_id)
            ).all()
        return [session_row(r) for r in rows]
