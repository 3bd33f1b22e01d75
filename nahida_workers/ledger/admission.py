"""The admission adapter of a ledger (``ports.AdmissionLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.children`: :func:`admission_ledger`
hands out one adapter per ledger object (the memory twin keeps its caps in
the adapter).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nahida_workers.ports import AdmissionLedger

__all__ = ["admission_ledger"]

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def admission_ledger(ledger: Any) -> AdmissionLedger:
    """The admission adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.memory_admission import MemoryAdmission
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ledger.sql_admission import SqlAdmission

    with _lock:
        found = _adapters.get(ledger)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = MemoryAdmission(ledger)
            elif isinstance(ledger, SqlLedger):
                found = SqlAdmission(ledger)
            else:
                raise TypeError(f"no admission adapter for {type(ledger).__name__}")
            _adapters[ledger] = found
        return found
