"""``nahida migrate``: back a PostgreSQL ledger up, then migrate it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nahida_workers.cli.common import err, out
from nahida_workers.cli.exits import redact_url

if TYPE_CHECKING:
    from nahida_workers.settings import Settings

__all__ = ["run_migrate"]


def run_migrate(
    settings: Settings,
    *,
    backup: bool,
    backup_dir: Path,
    pg_dump_path: str,
    now: datetime | None = None,
) -> None:
    """Dump (PostgreSQL, a migration pending, ``backup``), then upgrade to head.

    Prints the dump's path and size, then ``ledger migrated: URL (REV)``.

    Raises:
        PgDumpMissingError: no pg_dump and ``backup`` is set; nothing changed.
        BackupFailedError: pg_dump failed; nothing changed.
        LedgerUnavailableError / SQLAlchemy errors: the database is unreachable.
    """
    from nahida_workers.ledger.backup import backup_path, pg_dump, require_pg_dump
    from nahida_workers.ledger.migrate import current_revision, head_revision, upgrade
    from nahida_workers.ledger.sql import make_engine

    engine = make_engine(settings.database_url)
    try:
        before, head = current_revision(engine), head_revision()
        postgres = engine.dialect.name == "postgresql"
        if before == head:
            out().print(f"ledger migrated: {redact_url(settings.database_url)} (already at {head})")
            return
        if postgres and backup:
            require_pg_dump(pg_dump_path)  # before a word is printed: one error line
            target = backup_path(backup_dir, engine.url.database or "db", now or datetime.now(UTC))
            err().print(f"backing up to {target} (pg_dump) ...", markup=False)
            done = pg_dump(settings.database_url, target, executable=pg_dump_path)
            out().print(f"backup: {done.path} ({done.size_bytes} bytes)", markup=False)
        elif postgres:
            err().print("no backup (--no-backup)", markup=False)
        upgrade(engine)
        shown = f"{before or 'empty'} -> {head}"
        out().print(f"ledger migrated: {redact_url(settings.database_url)} ({shown})")
    finally:
        engine.dispose()
