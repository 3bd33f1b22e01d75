"""The in-memory twin of the admission port (``ports.AdmissionLedger``).

Composed over a :class:`~nahida_workers.ledger.memory.MemoryLedger`: each
method is one of its transactions (one global lock, the twin of the group
row lock the SQL adapter takes); the caps live in the adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from nahida_workers.constants import DEFAULT_PRIORITY, RUN_SESSION
from nahida_workers.core.capacity import admits, releasable
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import Admission, OutboxRecord, SessionRecord
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger.memory import MemoryLedger

__all__ = ["MemoryAdmission"]


class MemoryAdmission:
    """Concurrency caps over a memory ledger (see :class:`nahida_workers.ports.AdmissionLedger`)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._caps: dict[str, int | None] = {}

    def set_cap(self, group: str, max_running: int | None, *, at: datetime) -> None:
        """Create or update ``group`` with its cap."""
        with self.ledger.transaction() as tx:
            self.ledger.tables.put(tx, self._caps, group, max_running)

    def admit(self, session_id: str, *, at: datetime) -> bool:
        """Start the session under its group's cap, or defer it (see the port)."""
        led = self.ledger
        with led.transaction() as tx:
            session = led.tables.sessions.get(session_id)
            if session is None:
                raise NotFoundError(f"no session {session_id}")
            group = session.admission_group
            if group is None or session.status is SessionStatus.DONE or session.cancel_requested_at:
                return True
            cap = self._caps.get(group)
            if not cap:
                return True
            running = sum(
                1
                for s in self._members(group)
                if s.status is SessionStatus.RUNNING and s.session_id != session_id
            )
            admitted = admits(cap, running)
            status = SessionStatus.RUNNING if admitted else SessionStatus.QUEUED
            admission = None if admitted else Admission.DEFERRED
            led.tables.put(
                tx,
                led.tables.sessions,
                session_id,
                session.model_copy(
                    update={"status": status, "admission": admission, "updated_at": at}
                ),
            )
            return admitted

    def release(self, group: str, *, at: datetime, new_id: Callable[[], str]) -> list[OutboxRecord]:
        """Release as many deferred sessions as ``group`` has room for (see the port)."""
        led = self.ledger
        with led.transaction() as tx:
            members = self._members(group)
            waiting = [s for s in members if _is(s, Admission.DEFERRED)]
            room = releasable(
                self._caps.get(group),
                running=sum(1 for s in members if s.status is SessionStatus.RUNNING),
                released=sum(1 for s in members if _is(s, Admission.RELEASED)),
                deferred=len(waiting),
            )
            waiting.sort(key=lambda s: (-_priority(s), s.created_at, s.session_id))
            outbox = []
            for session in waiting[:room]:
                led.tables.put(
                    tx,
                    led.tables.sessions,
                    session.session_id,
                    session.model_copy(update={"admission": Admission.RELEASED, "updated_at": at}),
                )
                record = OutboxRecord(
                    outbox_id=new_id(),
                    session_id=session.session_id,
                    task_name=RUN_SESSION,
                    created_at=at,
                )
                led.add_outbox(tx, record)
                outbox.append(record)
            return outbox

    def deferred_groups(self) -> list[str]:
        """Groups that hold deferred sessions."""
        with self.ledger.tables.lock:
            return sorted(
                {
                    s.admission_group
                    for s in self.ledger.tables.sessions.values()
                    if s.admission_group is not None and _is(s, Admission.DEFERRED)
                }
            )

    def running(self, group: str) -> int:
        """How many sessions of ``group`` are running now."""
        with self.ledger.tables.lock:
            return sum(1 for s in self._members(group) if s.status is SessionStatus.RUNNING)

    def _members(self, group: str) -> list[SessionRecord]:
        return [s for s in self.ledger.tables.sessions.values() if s.admission_group == group]


def _is(session: SessionRecord, admission: Admission) -> bool:
    """Queued with this admission state."""
    return session.status is SessionStatus.QUEUED and session.admission is admission


def _priority(session: SessionRecord) -> int:
    return DEFAULT_PRIORITY if session.priority is None else session.priority
