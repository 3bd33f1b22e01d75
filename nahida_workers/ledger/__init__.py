"""The ledger: SQL (PostgreSQL, SQLite) and an in-memory twin, one rule set."""

from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ledger.sql import SqlLedger, make_engine

__all__ = ["MemoryLedger", "SqlLedger", "make_engine"]
