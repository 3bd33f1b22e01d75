"""The memory adapter of a ledger (``ports.RecallLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.teams` does it: the adapter
wraps the ledger it writes through, and :func:`recall_ledger` hands out one
adapter per ledger object (the memory twin keeps its rows in the adapter).
The rules both adapters enforce are in ``ledger/recall_rules.py``.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.ledger.adapters import adapter_of
from nahida_workers.ports import RecallLedger

__all__ = ["recall_ledger"]


def recall_ledger(ledger: Any) -> RecallLedger[Any]:
    """The memory adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory_recall import MemoryRecall
    from nahida_workers.ledger.sql_recall import SqlRecall

    adapter: RecallLedger[Any] = adapter_of(ledger, "memory", MemoryRecall, SqlRecall)
    return adapter
