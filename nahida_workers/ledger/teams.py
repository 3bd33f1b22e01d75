"""The team adapter of a ledger (``ports.TeamLedger``), one per ledger.

Composition, as :mod:`nahida_workers.ledger.children` does it: the adapter
wraps the ledger it writes through, and :func:`team_ledger` hands out one
adapter per ledger object (the memory twin keeps its team rows in the
adapter).
"""

from __future__ import annotations

from typing import Any

from nahida_workers.ledger.adapters import adapter_of
from nahida_workers.ports import TeamLedger

__all__ = ["team_ledger"]


def team_ledger(ledger: Any) -> TeamLedger[Any]:
    """The team adapter composed over ``ledger`` (memory or SQL).

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``.
    """
    from nahida_workers.ledger.memory_teams import MemoryTeams
    from nahida_workers.ledger.sql_teams import SqlTeams

    adapter: TeamLedger[Any] = adapter_of(ledger, "team", MemoryTeams, SqlTeams)
    return adapter
