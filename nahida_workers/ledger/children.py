"""The child-session adapter of a ledger (``ports.ChildLedger``), one per ledger.

Composition, not a mixin: the adapter wraps the ledger it writes through,
and :func:`child_ledger` hands out one adapter per ledger object (the memory
twin keeps its lineage in the adapter).
"""

from __future__ import annotations

from typing import Any

from nahida_workers.ledger.adapters import adapter_of
from nahida_workers.ports import ChildLedger

__all__ = ["child_ledger"]


def child_ledger(ledger: Any) -> ChildLedger[Any]:
    """The child-session adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory_children import MemoryChildren
    from nahida_workers.ledger.sql_children import SqlChildren

    adapter: ChildLedger[Any] = adapter_of(ledger, "child-session", MemoryChildren, SqlChildren)
    return adapter
