"""The ledger: SQL (PostgreSQL, SQLite) and an in-memory twin, one rule set.

:mod:`.sql` (``SqlLedger``, ``make_engine``) is the SQL adapter, assembled
from the ``sql_*`` parts, with the PostgreSQL hot paths of :mod:`.pg_raw` and
:mod:`.pg_commit`; :mod:`.memory` (``MemoryLedger``) is its in-memory twin,
assembled from the ``memory_*`` parts; :mod:`.rules` is the refusal rules both
share; :mod:`.children` is the child-session port of either; :mod:`.schema`
and :mod:`.migrate` are the tables and their Alembic migrations. The package
re-exports nothing, so importing it imports nothing: each caller imports the
adapter it uses (a command that reads the SQL ledger never imports the twin).
"""
