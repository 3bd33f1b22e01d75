"""The admission port on the SQL ledger (``ports.AdmissionLedger``, DESIGN.md section 1).

Composed over a :class:`~nahida_workers.ledger.sql.SqlLedger`.  Every
admission and release of a group first locks the group's
``admission_groups`` row (``SELECT ... FOR UPDATE``; SQLite serialises its
writers with ``BEGIN IMMEDIATE``), then counts and writes: two deliveries of
one group cannot both take its last slot, and a session deferred just as a
slot frees is always seen by that slot's release.  Counting a group's
running sessions reads ``ix_sessions_group_status``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update

from nahida_workers.constants import DEFAULT_PRIORITY, RUN_SESSION
from nahida_workers.core.capacity import admits, releasable
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import Admission, OutboxRecord
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope

__all__ = ["SqlAdmission"]

#: Most sessions one release publishes (an uncapped group releases them all, in steps).
RELEASE_STEP = 1000


class SqlAdmission:
    """Concurrency caps on a SQL ledger (see :class:`nahida_workers.ports.AdmissionLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    def set_cap(self, group: str, max_running: int | None, *, at: datetime) -> None:
        """Create or update ``group`` with its cap."""
        g = t.admission_groups.c
        with self.ledger.transaction() as tx:
            found = tx.conn.execute(
                select(g.group_key).where(g.group_key == group).with_for_update()
            ).first()
            if found is None:
                tx.conn.execute(
                    insert(t.admission_groups).values(
                        group_key=group, max_running=max_running, created_at=at, updated_at=at
                    )
                )
            else:
                tx.conn.execute(
                    update(t.admission_groups)
                    .where(g.group_key == group)
                    .values(max_running=max_running, updated_at=at)
                )

    def admit(self, session_id: str, *, at: datetime) -> bool:
        """Start the session under its group's cap, or defer it (see the port)."""
        s = t.sessions.c
        with self.ledger.transaction() as tx:
            conn = tx.conn
            row = conn.execute(
                select(s.status, s.admission_group, s.cancel_requested_at).where(
                    s.session_id == session_id
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no session {session_id}")
            group = row.admission_group
            # A cancelled session is let through: its owner seals it at once.
            if group is None or row.status == SessionStatus.DONE.value or row.cancel_requested_at:
                return True
            cap = self._lock(conn, group)
            if not cap:
                return True
            running = self._count(conn, group, status=SessionStatus.RUNNING, besides=session_id)
            admitted = admits(cap, running)
            values: dict[str, Any] = (
                {"status": SessionStatus.RUNNING.value, "admission": None}
                if admitted
                else {"status": SessionStatus.QUEUED.value, "admission": Admission.DEFERRED.value}
            )
            conn.execute(
                update(t.sessions).where(s.session_id == session_id).values(**values, updated_at=at)
            )
            return admitted

    def release(self, group: str, *, at: datetime, new_id: Callable[[], str]) -> list[OutboxRecord]:
        """Release as many deferred sessions as ``group`` has room for (see the port)."""
        s = t.sessions.c
        with self.ledger.transaction() as tx:
            conn = tx.conn
            cap = self._lock(conn, group)
            room = releasable(
                cap,
                running=self._count(conn, group, status=SessionStatus.RUNNING),
                released=self._count(
                    conn, group, status=SessionStatus.QUEUED, admission=Admission.RELEASED
                ),
                deferred=RELEASE_STEP,
            )
            if room == 0:
                return []
            chosen = list(
                conn.execute(
                    select(s.session_id)
                    .where(
                        s.admission_group == group,
                        s.admission == Admission.DEFERRED.value,
                        s.status == SessionStatus.QUEUED.value,
                    )
                    .order_by(
                        func.coalesce(s.priority, DEFAULT_PRIORITY).desc(),
                        s.created_at,
                        s.session_id,
                    )
                    .limit(room)
                ).scalars()
            )
            outbox = []
            for session_id in chosen:
                conn.execute(
                    update(t.sessions)
                    .where(s.session_id == session_id)
                    .values(admission=Admission.RELEASED.value, updated_at=at)
                )
                record = OutboxRecord(
                    outbox_id=new_id(), session_id=session_id, task_name=RUN_SESSION, created_at=at
                )
                self.ledger.add_outbox(tx, record)
                outbox.append(record)
            return outbox

    def deferred_groups(self) -> list[str]:
        """Groups that hold deferred sessions."""
        s = t.sessions.c
        with self._read() as conn:
            return sorted(
                conn.execute(
                    select(s.admission_group)
                    .where(
                        s.admission == Admission.DEFERRED.value,
                        s.status == SessionStatus.QUEUED.value,
                        s.admission_group.is_not(None),
                    )
                    .distinct()
                ).scalars()
            )

    def running(self, group: str) -> int:
        """How many sessions of ``group`` are running now."""
        with self._read() as conn:
            return self._count(conn, group, status=SessionStatus.RUNNING)

    def _read(self) -> ReadScope:
        return ReadScope(self.ledger.engine.execution_options(ledger_read=True))

    @staticmethod
    def _lock(conn: Any, group: str) -> int | None:
        """Lock the group's row; its cap (None when the group has no row)."""
        g = t.admission_groups.c
        cap = conn.execute(
            select(g.max_running).where(g.group_key == group).with_for_update()
        ).scalar()
        return int(cap) if cap is not None else None

    @staticmethod
    def _count(
        conn: Any,
        group: str,
        *,
        status: SessionStatus,
        admission: Admission | None = None,
        besides: str | None = None,
    ) -> int:
        s = t.sessions.c
        query = (
            select(func.count())
            .select_from(t.sessions)
            .where(s.admission_group == group, s.status == status.value)
        )
        if admission is not None:
            query = query.where(s.admission == admission.value)
        if besides is not None:
            query = query.where(s.session_id != besides)
        return int(conn.execute(query).scalar_one())
