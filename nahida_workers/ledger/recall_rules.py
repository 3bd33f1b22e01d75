"""The workspace-memory rules both ledger adapters enforce (``ports.RecallLedger``).

Kept apart from the adapter factory (``ledger/recall.py``) so the adapters
import it without importing the factory that imports them.
"""

from __future__ import annotations

import hashlib

from nahida_workers.core.memory import MemoryItem, MemoryStatus
from nahida_workers.errors import LedgerIntegrityError

__all__ = ["COUNTERS", "check_new_item", "same_item", "workspace_key"]

#: The memory counters, in the order listings show them.
COUNTERS = (
    "written_active",
    "written_pending",
    "approved",
    "rejected",
    "injected",
    "superseded",
)


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
