"""The memory adapter of a ledger (``ports.RecallLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.teams` does it: the adapter
wraps the ledger it writes through, and :func:`recall_ledger` hands out one
adapter per ledger object (the memory twin keeps its rows in the adapter).
The rules both adapters enforce are in ``ledger/recall_rules.py``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nahida_workers.ports import RecallLedger

__all__ = ["recall_ledger"]

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


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
