"""The control-fact adapter of a ledger (``ports.ControlLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.children`: :func:`control_ledger`
hands out one adapter per ledger object (the memory twin keeps its timers
in the adapter).
"""

from __future__ import annotations

from typing import Any

from nahida_workers.ledger.adapters import adapter_of
from nahida_workers.ports import ControlLedger

__all__ = ["control_ledger"]


def control_ledger(ledger: Any) -> ControlLedger[Any]:
    """The control-fact adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory_control import MemoryControl
    from nahida_workers.ledger.sql_control import SqlControl

    adapter: ControlLedger[Any] = adapter_of(ledger, "control-fact", MemoryControl, SqlControl)
    return adapter
