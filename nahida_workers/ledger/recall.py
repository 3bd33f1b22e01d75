"""The memory adapter of a ledger (``ports.RecallLedger``, issue 23 item 5), one per ledger.

Composition, as :mod:`nahida_workers.ledger.teams` does it: the adapter
wraps the ledger it writes through, and :func:`recall_ledger` hands out one
adapter per ledger object (the memory twin keeps its rows in the adapter).
The rules both adapters enforce are here (:func:`check_new_item`).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any

from nahida_workers.core.memory import MemoryItem, MemoryStatus
from nahida_workers.errors import LedgerIntegrityError
from nahida_workers.ports import RecallLedger

__all__ = ["COUNTERS", "check_new_item", "recall_ledger", "same_item", "workspace_key"]

#: The memory counters, in the order listings show them.
COUNTERS = (
    "written_active",
    "written_pending",
    "approved",
    "rejected",
    "injected",
    "superseded",
)

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def workspace_key(workspace: str) -> str:
    """sha256 hex of the workspace path: the short indexed column items are keyed by."""
    return hashlib.sha256(workspace.encode("utf-8")).hexdigest()


def check_new_item(item: MemoryItem) -> None:
    """The ledger's rules for a new item.

    Raises:
        LedgerIntegrityError: written ``rejected``, its initial status differs
            from its status, or active without ``verified_at``.
    """
    if item.status is MemoryStatus.REJECTED:
        raise LedgerIntegrityError(f"memory item {item.item_id}: written rejected")
    if item.initial_status is not item.status:
        raise LedgerIntegrityError(f"memory item {item.item_id}: initial status is not its status")
    if item.status is MemoryStatus.ACTIVE and item.verified_at is None:
        raise LedgerIntegrityError(f"memory item {item.item_id}: active without verified_at")


def same_item(a: MemoryItem, b: MemoryItem) -> bool:
    """Whether ``b`` is a repeat of ``a``'s write (same id, workspace and content)."""
    return (a.item_id, a.workspace, a.sha256) == (b.item_id, b.workspace, b.sha256)


def recall_ledger(ledger: Any) -> RecallLedger[Any]:
    """The memory adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.memory_recall import MemoryRecall
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ledger.sql_recall import SqlRecall

    with _lock:
        found = _adapters.get(ledger)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = MemoryRecall(ledger)
            elif isinstance(ledger, SqlLedger):
                found = SqlRecall(ledger)
            else:
                raise TypeError(f"no memory adapter for {type(ledger).__name__}")
            _adapters[ledger] = found
        return found
