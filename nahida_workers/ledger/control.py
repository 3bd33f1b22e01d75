"""The control-fact adapter of a ledger (``ports.ControlLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.children`: :func:`control_ledger`
hands out one adapter per ledger object (the memory twin keeps its timers
in the adapter).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nahida_workers.ports import ControlLedger

__all__ = ["control_ledger"]

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def control_ledger(ledger: Any) -> ControlLedger[Any]:
    """The control-fact adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.memory_control import MemoryControl
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ledger.sql_control import SqlControl

    with _lock:
        found = _adapters.get(ledger)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = MemoryControl(ledger)
            elif isinstance(ledger, SqlLedger):
                found = SqlControl(ledger)
            else:
                raise TypeError(f"no control-fact adapter for {type(ledger).__name__}")
            _adapters[ledger] = found
        return found
