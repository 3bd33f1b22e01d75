"""The in-memory twin of the control-fact port (``ports.ControlLedger``, DESIGN.md section 8).

Composed over a :class:`~nahida_workers.ledger.memory.MemoryLedger`: it
writes in that ledger's transactions (one global lock, the twin of the row
locks the SQL adapter takes) and journals every write for rollback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.facts import Timer, may_seal
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.memory import MemoryLedger, MemoryTx
from nahida_workers.ports import Fence

__all__ = ["MemoryControl"]


class MemoryControl:
    """Fences and timers over a memory ledger (see :class:`nahida_workers.ports.ControlLedger`)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._timers: dict[str, Timer] = {}

    def fence_unowned(
        self, tx: MemoryTx, session_id: str, *, lease_free: bool, at: datetime
    ) -> Fence | None:
        """Bump the epoch of a session no worker holds and fence ``tx`` with it."""
        led = self.ledger
        session = led.tables.sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        if not may_seal(session.status, session.open_epoch, lease_free=lease_free):
            return None
        epoch = session.lease_epoch + 1
        led._update_session(tx, session_id, lease_epoch=epoch, updated_at=at)
        led.lock_session(tx, session_id, epoch)
        return tx.fence

    def flag_cancel(self, tx: MemoryTx, session_id: str, *, at: datetime) -> bool:
        """The cancel flag, unless the session is done."""
        session = self.ledger.tables.sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        if session.status is SessionStatus.DONE:
            return False
        self.ledger.request_cancel(tx, session_id, at=at)
        return True

    def cancel_flags(
        self, tx: MemoryTx, session_ids: Sequence[str]
    ) -> dict[str, tuple[bool, bool]]:
        """``(cancel requested, parent_close is cancel)`` per known session."""
        found = {}
        for sid in session_ids:
            session = self.ledger.tables.sessions.get(sid)
            if session is not None:
                follows = str(session.config.get("parent_close", "cancel")) == "cancel"
                found[sid] = (session.cancel_requested_at is not None, follows)
        return found

    def set_timer(self, tx: MemoryTx, timer: Timer) -> None:
        """Arm (or re-arm) ``timer``."""
        if timer.session_id not in self.ledger.tables.sessions:  # the SQL foreign key
            raise LedgerIntegrityError(f"timer {timer.timer_id}: no session {timer.session_id}")
        armed = replace(timer, fired_at=None, outcome=None)
        self.ledger.tables.put(tx, self._timers, timer.timer_id, armed)

    def fire_timer(self, tx: MemoryTx, timer_id: str, *, outcome: str, at: datetime) -> bool:
        """Mark an armed timer fired (compare-and-set on ``fired_at``)."""
        timer = self._timers.get(timer_id)
        if timer is None or timer.fired_at is not None:
            return False
        fired = replace(timer, fired_at=at, outcome=outcome)
        self.ledger.tables.put(tx, self._timers, timer_id, fired)
        return True

    def due_timers(self, *, now: datetime, limit: int = 100) -> list[Timer]:
        """Armed timers due at ``now``, earliest first."""
        with self.ledger.tables.lock:
            due = [t for t in self._timers.values() if t.fired_at is None and t.due_at <= now]
        return sorted(due, key=lambda t: (t.due_at, t.timer_id))[:limit]

    def timers(self, session_id: str) -> list[Timer]:
        """Every timer of ``session_id``, earliest due first."""
        with self.ledger.tables.lock:
            found = [t for t in self._timers.values() if t.session_id == session_id]
        return sorted(found, key=lambda t: (t.due_at, t.timer_id))
