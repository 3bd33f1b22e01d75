"""The team adapter of a ledger (``ports.TeamLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.children` does it: the adapter
wraps the ledger it writes through, and :func:`team_ledger` hands out one
adapter per ledger object (the memory twin keeps its team rows in the
adapter).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nahida_workers.ports import TeamLedger

__all__ = ["team_ledger"]

_adapters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def team_ledger(ledger: Any) -> TeamLedger[Any]:
    """The team adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.memory_teams import MemoryTeams
    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.ledger.sql_teams import SqlTeams

    with _lock:
        found = _adapters.get(ledger)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = MemoryTeams(ledger)
            elif isinstance(ledger, SqlLedger):
                found = SqlTeams(ledger)
            else:
                raise TypeError(f"no team adapter for {type(ledger).__name__}")
            _adapters[ledger] = found
        return found
