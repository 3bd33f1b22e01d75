"""The in-memory twin of the child-session port (``ports.ChildLedger``).

Composed over a :class:`~nahida_workers.ledger.memory.MemoryLedger`: it
writes in that ledger's transactions (one global lock, the twin of the row
locks the SQL adapter takes) and journals every write for rollback.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nahida_workers.core.events import Event, SessionStatus
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.records import InboxMessage, OutboxRecord, RunRecord, SessionRecord
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.memory import MemoryLedger, MemoryTx
from nahida_workers.ledger.rules import storable

__all__ = ["MemoryChildren"]


class MemoryChildren:
    """Child sessions over a memory ledger (see :class:`nahida_workers.ports.ChildLedger`)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._links: dict[str, ChildLink] = {}

    def spawn_child(
        self,
        tx: MemoryTx,
        child: SessionRecord,
        link: ChildLink,
        run: RunRecord,
        prompt: Event,
        outbox: OutboxRecord | None,
        limits: ChildLimits,
    ) -> SpawnOutcome:
        """Insert a child with its first run, prompt and outbox row, or refuse (limits)."""
        led = self.ledger
        if child.session_id in led.tables.sessions:
            return SpawnOutcome.EXISTS
        if link.parent_id is None or link.parent_id not in led.tables.sessions:
            raise NotFoundError(f"no parent session {link.parent_id}")
        if link.depth > limits.max_depth:
            return SpawnOutcome.REFUSED_DEPTH
        siblings = sum(1 for s in led.tables.sessions.values() if s.parent_id == link.parent_id)
        if siblings >= limits.max_per_session:
            return SpawnOutcome.REFUSED_COUNT
        running = sum(
            1
            for sid, ln in self._links.items()
            if ln.root_id == link.root_id
            and led.tables.sessions[sid].status is not SessionStatus.DONE
        )
        if running >= limits.max_running_per_root:
            return SpawnOutcome.REFUSED_RUNNING
        led.tables.put(tx, led.tables.sessions, child.session_id, storable(child))
        led.tables.put(tx, self._links, child.session_id, link)
        led.tables.put(tx, led.tables.runs, run.run_id, storable(run))
        led.tables.put(tx, led.tables.events, run.run_id, [prompt.model_copy(update={"epoch": 0})])
        if outbox is not None:
            led.add_outbox(tx, outbox)
        return SpawnOutcome.CREATED

    def post_child_completion(
        self, tx: MemoryTx, message: InboxMessage, outbox: OutboxRecord, *, at: datetime
    ) -> bool:
        """The completion into the parent's inbox; wake a ``waiting`` parent (returns True)."""
        led = self.ledger
        parent = led.tables.sessions.get(message.session_id)
        if parent is None:
            raise NotFoundError(f"no session {message.session_id}")
        if message.message_id not in led.tables.inbox:
            led.tables.put(tx, led.tables.inbox, message.message_id, storable(message))
        if parent.status is not SessionStatus.WAITING:
            return False
        link = self._links.get(parent.session_id)
        awaiting = link.awaiting if link is not None else ()
        if not all(
            (s := led.tables.sessions.get(cid)) is not None and s.status is SessionStatus.DONE
            for cid in awaiting
        ):
            return False  # the last awaited child to finish wakes it
        led._update_session(tx, parent.session_id, status=SessionStatus.QUEUED, updated_at=at)
        led.add_outbox(tx, outbox)
        return True

    def park(self, tx: MemoryTx, session_id: str, awaiting: Sequence[str], *, at: datetime) -> bool:
        """``waiting`` with ``awaiting`` recorded, iff an awaited child is not done."""
        led = self.ledger
        if tx.fence is None or tx.fence.session_id != session_id:
            raise LedgerIntegrityError("park needs the session's own fence")
        if all(
            (s := led.tables.sessions.get(cid)) is not None and s.status is SessionStatus.DONE
            for cid in awaiting
        ):
            return False
        own = led.tables.sessions.get(session_id)
        if own is not None and own.cancel_requested_at is not None:
            return False  # a cancel is never parked on (ports.ChildLedger.park)
        led._update_session(tx, session_id, status=SessionStatus.WAITING, updated_at=at)
        link = self._links.get(session_id) or ChildLink(session_id, root_id=session_id)
        led.tables.put(tx, self._links, session_id, _with_awaiting(link, awaiting))
        return True

    def link(self, session_id: str) -> ChildLink | None:
        """A session's place in its tree (a top-level session is its own root)."""
        with self.ledger.tables.lock:
            if session_id not in self.ledger.tables.sessions:
                return None
            return self._links.get(session_id) or ChildLink(session_id, root_id=session_id)

    def children(self, parent_id: str) -> list[SessionRecord]:
        """The children of a session, oldest first."""
        with self.ledger.tables.lock:
            found = [s for s in self.ledger.tables.sessions.values() if s.parent_id == parent_id]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))


def _with_awaiting(link: ChildLink, awaiting: Sequence[str]) -> ChildLink:
    return ChildLink(
        link.session_id, link.parent_id, link.root_id, link.depth, link.lineage, tuple(awaiting)
    )
