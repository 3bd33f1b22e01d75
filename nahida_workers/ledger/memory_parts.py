"""Parts of the in-memory ledger twin: its tables, its reads and its inbox.

:class:`~nahida_workers.ledger.memory.MemoryLedger` holds these (composition,
as :class:`~nahida_workers.ledger.sql.SqlLedger` holds its SQL parts) and
forwards their methods.  Same rules and refusals as the SQL parts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nahida_workers.core.events import Event, ExecutionReceipt, SessionStatus
from nahida_workers.core.records import (
    BatchRecord,
    InboxLimits,
    InboxMessage,
    InboxStatus,
    OutboxRecord,
    RunRecord,
    SessionRecord,
)
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.rules import check_inbox, storable
from nahida_workers.ports import Fence

__all__ = ["MemoryInbox", "MemoryReads", "MemoryTables", "MemoryTx"]


class MemoryTx:
    """An open in-memory transaction: its fence and its undo journal."""

    def __init__(self) -> None:
        self.fence: Fence | None = None
        self.cancel_requested = False
        self.pending_inbox = 0
        self.undo: list[Callable[[], None]] = []


@dataclass
class MemoryTables:
    """The twin's rows, one dict per table, behind one lock (the twin of a row lock)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    batches: dict[str, BatchRecord] = field(default_factory=dict)
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    receipts: dict[str, list[ExecutionReceipt]] = field(default_factory=dict)
    outbox: dict[str, OutboxRecord] = field(default_factory=dict)
    inbox: dict[str, InboxMessage] = field(default_factory=dict)
    fleet: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)

    def put(self, tx: MemoryTx, table: dict[str, Any], key: str, value: object) -> None:
        """Set ``table[key]`` in ``tx``, journaling the undo."""
        had, old = key in table, table.get(key)

        def undo() -> None:
            if had:
                table[key] = old
            else:
                table.pop(key, None)

        table[key] = value
        tx.undo.append(undo)


class MemoryInbox:
    """The inbox part of the twin (``LedgerInbox`` and the inbox read).

    Args:
        tables: the twin's tables.
        require_fence: the core's check that ``tx`` is fenced for a run's session.
    """

    def __init__(
        self, tables: MemoryTables, require_fence: Callable[[MemoryTx, str], Fence]
    ) -> None:
        self._t = tables
        self._require_fence = require_fence

    def enqueue_inbox(
        self, tx: MemoryTx, message: InboxMessage, limits: InboxLimits
    ) -> tuple[InboxMessage, bool]:
        """Add a pending message, or return the one already holding its id."""
        message = storable(message)
        if message.session_id not in self._t.sessions:
            raise NotFoundError(f"no session {message.session_id}")
        existing = self._t.inbox.get(message.message_id)
        if existing is not None:
            return existing, False
        pending = [
            (m.kind.value, m.size_bytes)
            for m in self._t.inbox.values()
            if m.session_id == message.session_id and m.status is InboxStatus.PENDING
        ]
        check_inbox(pending, message.kind.value, message.size_bytes, limits)
        self._t.put(tx, self._t.inbox, message.message_id, message)
        return message, True

    def claim_inbox(
        self, tx: MemoryTx, run_id: str, message_ids: Sequence[str], *, at: datetime
    ) -> None:
        """Mark pending messages of the fenced session claimed by ``run_id``."""
        if not message_ids:
            return
        fence = self._require_fence(tx, run_id)
        for message_id in set(message_ids):
            message = self._t.inbox.get(message_id)
            if (
                message is None
                or message.session_id != fence.session_id
                or message.status is not InboxStatus.PENDING
            ):
                raise LedgerIntegrityError("inbox messages are not pending for this session")
            claimed = message.model_copy(
                update={"status": InboxStatus.CLAIMED, "claimed_at": at, "claimed_run_id": run_id}
            )
            self._t.put(tx, self._t.inbox, message_id, claimed)

    def acknowledge_inbox(self, tx: MemoryTx, run_id: str, *, at: datetime) -> int:
        """Acknowledge every message ``run_id`` claimed; returns how many."""
        self._require_fence(tx, run_id)
        done = 0
        for message_id, message in list(self._t.inbox.items()):
            if message.claimed_run_id == run_id and message.status is InboxStatus.CLAIMED:
                acked = message.model_copy(
                    update={"status": InboxStatus.ACKNOWLEDGED, "acknowledged_at": at}
                )
                self._t.put(tx, self._t.inbox, message_id, acked)
                done += 1
        return done

    def inbox(
        self, session_id: str, *, statuses: Sequence[InboxStatus] | None = None
    ) -> list[InboxMessage]:
        """A session's inbox messages, oldest first."""
        with self._t.lock:
            found = [
                m
                for m in self._t.inbox.values()
                if m.session_id == session_id and (statuses is None or m.status in statuses)
            ]
        return sorted(found, key=lambda m: (m.created_at, m.message_id))


class MemoryReads:
    """The reads part of the twin (``LedgerReader`` and ``load_run``).

    Args:
        tables: the twin's tables.
    """

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def load_run(self, fence: Fence, run_id: str) -> tuple[list[Event], list[ExecutionReceipt]]:
        """A new owner's read of its run: every event and receipt."""
        return self.events(run_id), self.receipts(run_id)

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session or None."""
        with self._t.lock:
            return self._t.sessions.get(session_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run or None."""
        with self._t.lock:
            return self._t.runs.get(run_id)

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        with self._t.lock:
            runs = [r for r in self._t.runs.values() if r.session_id == session_id]
        return sorted(runs, key=lambda r: (r.started_at, r.run_id))

    def events(self, run_id: str) -> list[Event]:
        """Events of a run by sequence."""
        with self._t.lock:
            return list(self._t.events.get(run_id, []))

    def receipts(self, run_id: str) -> list[ExecutionReceipt]:
        """Receipts in write order."""
        with self._t.lock:
            return list(self._t.receipts.get(run_id, []))

    def sessions(
        self,
        *,
        batch_id: str | None = None,
        statuses: Sequence[SessionStatus] | None = None,
        updated_before: datetime | None = None,
    ) -> list[SessionRecord]:
        """Sessions, optionally by batch, status and last change, oldest first."""
        with self._t.lock:
            found = [
                s
                for s in self._t.sessions.values()
                if (batch_id is None or s.batch_id == batch_id)
                and (statuses is None or s.status in statuses)
                and (updated_before is None or s.updated_at < updated_before)
            ]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))

    def session_counts(self) -> dict[SessionStatus, tuple[int, datetime | None]]:
        """Per status: how many sessions, and the oldest ``updated_at``."""
        counts: dict[SessionStatus, tuple[int, datetime | None]] = {}
        with self._t.lock:
            for s in self._t.sessions.values():
                n, oldest = counts.get(s.status, (0, None))
                counts[s.status] = (
                    n + 1,
                    s.updated_at if oldest is None or s.updated_at < oldest else oldest,
                )
        return counts

    def quiet_sessions(self, *, older_than: datetime) -> list[str]:
        """Unfinished sessions whose open run has written nothing since ``older_than``."""
        with self._t.lock:
            quiet = []
            for session in self._t.sessions.values():
                if session.status not in (SessionStatus.QUEUED, SessionStatus.RUNNING):
                    continue
                for run in self._t.runs.values():
                    if run.session_id != session.session_id or run.terminal_state is not None:
                        continue
                    events = self._t.events.get(run.run_id, [])
                    if run.started_at < older_than and not any(
                        e.created_at is not None and e.created_at >= older_than for e in events
                    ):
                        quiet.append(session.session_id)
            return sorted(set(quiet))

    def batches(self) -> list[BatchRecord]:
        """All batches, newest first."""
        with self._t.lock:
            return sorted(self._t.batches.values(), key=lambda b: b.created_at, reverse=True)

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch or None."""
        with self._t.lock:
            return self._t.batches.get(batch_id)

    def pending_outbox(self, *, limit: int = 100) -> list[OutboxRecord]:
        """Unpublished outbox rows, oldest first."""
        with self._t.lock:
            rows = [r for r in self._t.outbox.values() if r.published_at is None]
        return sorted(rows, key=lambda r: r.created_at)[:limit]
