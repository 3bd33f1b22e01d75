"""The child-session adapter of a ledger (``ports.ChildLedger``), one per ledger.

Composition, not a mixin: the adapter wraps the ledger it writes through,
and :func:`child_ledger` hands out one adapter per ledger object (the memory
twin keeps its lineage in the adapter).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nahida_workers.ports import ChildLedger

__all__ = ["child_ledger"]

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def child_ledger(ledger: Any) -> ChildLedger[Any]:
    """The child-session adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.memory_children import MemoryChildren
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ledger.sql_children import SqlChildren

    with _lock:
        found = _adapters.get(ledger)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = MemoryChildren(ledger)
            elif isinstance(ledger, SqlLedger):
                found = SqlChildren(ledger)
            else:
                raise TypeError(f"no child-session adapter for {type(ledger).__name__}")
            _adapters[ledger] = found
        return found
