"""The ledger: SQL (PostgreSQL, SQLite) and an in-memory twin, one rule set.

The names are imported on first use (PEP 562), so a command that reads the
SQL ledger does not import the in-memory twin (CLI start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.sql import SqlLedger, make_engine

__all__ = ["MemoryLedger", "SqlLedger", "make_engine"]


def __getattr__(name: str) -> Any:
    if name == "MemoryLedger":
        from nahida_workers.ledger.memory import MemoryLedger

        return MemoryLedger
    if name in ("SqlLedger", "make_engine"):
        from nahida_workers.ledger import sql

        return getattr(sql, name)
    raise AttributeError(name)
