"""The in-memory twin of the workspace-memory port (``ports.RecallLedger``).

Composed over a :class:`~nahida_workers.ledger.memory.MemoryLedger`: writes
run in its transactions (one global lock) and are journaled for rollback.
Same rules and refusals as ``ledger/sql_recall.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from nahida_workers.core.memory import MemoryItem, MemoryStatus
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.memory import MemoryLedger, MemoryTx
from nahida_workers.ledger.recall_rules import COUNTERS, check_new_item, same_item, workspace_key

__all__ = ["MemoryRecall"]


class MemoryRecall:
    """Workspace memory over a memory ledger (see :class:`nahida_workers.ports.RecallLedger`)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._items: dict[str, MemoryItem] = {}
        self._by_content: dict[str, str] = {}  # "workspace key\0sha" -> item id
        self._uses: dict[str, tuple[datetime | None, datetime | None]] = {}  # "sid\0item"
        self._use_root: dict[str, str] = {}

    def add_item(self, tx: MemoryTx, item: MemoryItem) -> tuple[MemoryItem, bool]:
        """Write ``item``, or return the one with its id or content."""
        check_new_item(item)
        existing = self._items.get(item.item_id)
        if existing is not None:
            if not same_item(existing, item):
                raise LedgerIntegrityError(f"memory item {item.item_id} holds other content")
            return existing, False
        content = f"{workspace_key(item.workspace)}\0{item.sha256}"
        other = self._by_content.get(content)
        if other is not None:
            return self._items[other], False
        put = self.ledger.tables.put
        put(tx, self._items, item.item_id, item)
        put(tx, self._by_content, content, item.item_id)
        return item, True

    def decide_item(
        self,
        tx: MemoryTx,
        item_id: str,
        status: MemoryStatus,
        *,
        at: datetime,
        by: str,
        expires_at: datetime | None = None,
    ) -> MemoryItem:
        """Approve (verified now) or reject an item."""
        if status is MemoryStatus.PENDING:
            raise LedgerIntegrityError("a decision is active or rejected, not pending")
        item = self._items.get(item_id)
        if item is None:
            raise NotFoundError(f"no memory item {item_id}")
        decided = replace(
            item,
            status=status,
            decided_at=at,
            decided_by=by,
            verified_at=at if status is MemoryStatus.ACTIVE else item.verified_at,
            expires_at=expires_at if expires_at is not None else item.expires_at,
        )
        self.ledger.tables.put(tx, self._items, item_id, decided)
        return decided

    def record_uses(
        self,
        tx: MemoryTx,
        session_id: str,
        *,
        root_id: str,
        injected: Sequence[str] = (),
        superseded: Sequence[str] = (),
        at: datetime,
    ) -> int:
        """Note each item's injection / supersession once per session."""
        new = 0
        put = self.ledger.tables.put
        for item_id, column in [*((i, 0) for i in injected), *((i, 1) for i in superseded)]:
            if item_id not in self._items:
                raise LedgerIntegrityError(f"no memory item {item_id}")
            key = f"{session_id}\0{item_id}"
            row = list(self._uses.get(key, (None, None)))
            if row[column] is not None:
                continue
            row[column] = at
            put(tx, self._uses, key, (row[0], row[1]))
            put(tx, self._use_root, key, root_id)
            new += 1
        return new

    def get_item(self, item_id: str) -> MemoryItem | None:
        """One item by id."""
        with self.ledger.tables.lock:
            return self._items.get(item_id)

    def items(
        self, *, workspace: str | None = None, statuses: Sequence[MemoryStatus] | None = None
    ) -> list[MemoryItem]:
        """Items, oldest first."""
        with self.ledger.tables.lock:
            found = [
                i
                for i in self._items.values()
                if (workspace is None or i.workspace == workspace)
                and (statuses is None or i.status in statuses)
            ]
        return sorted(found, key=lambda i: (i.created_at, i.item_id))

    def counts(self, *, workspace: str | None = None) -> dict[str, int]:
        """The memory counters (``ledger/recall_rules.py`` ``COUNTERS``)."""
        with self.ledger.tables.lock:
            mine = [
                i for i in self._items.values() if workspace is None or i.workspace == workspace
            ]
            ids = {i.item_id for i in mine}
            uses = [v for k, v in self._uses.items() if k.split("\0", 1)[1] in ids]
        pending = MemoryStatus.PENDING
        found = {
            "written_active": sum(1 for i in mine if i.initial_status is MemoryStatus.ACTIVE),
            "written_pending": sum(1 for i in mine if i.initial_status is pending),
            "approved": sum(
                1 for i in mine if i.initial_status is pending and i.status is MemoryStatus.ACTIVE
            ),
            "rejected": sum(1 for i in mine if i.status is MemoryStatus.REJECTED),
            "injected": sum(1 for u in uses if u[0] is not None),
            "superseded": sum(1 for u in uses if u[1] is not None),
        }
        return {name: found[name] for name in COUNTERS}
