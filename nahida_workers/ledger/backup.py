"""The backup ``nahida migrate`` takes before it changes a PostgreSQL ledger.

``pg_dump --format=custom`` of the whole database, restorable with
``pg_restore``.  The dump is written to ``PATH.partial`` and renamed only
when ``pg_dump`` exits 0, so a file without the suffix is always a complete
dump; it is created readable by its owner only (it holds every prompt and
result of the ledger).  The password never appears on a command line: it is
passed in ``PGPASSWORD``, the rest of the URL as a libpq connection URI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from nahida_workers.errors import UserError

__all__ = [
    "DEFAULT_BACKUP_DIR",
    "BackupFailedError",
    "BackupResult",
    "PgDumpMissingError",
    "backup_path",
    "libpq_target",
    "pg_dump",
    "require_pg_dump",
]

#: Where dumps go unless ``--backup-dir`` says otherwise (beside the embedded ledger).
DEFAULT_BACKUP_DIR = Path("var/backups")

#: Seconds a dump may take before it is abandoned (and the migration with it).
DUMP_TIMEOUT_S = 3600.0


class PgDumpMissingError(UserError):
    """``pg_dump`` is not installed (or not at the given path); nothing was migrated."""


class BackupFailedError(UserError):
    """``pg_dump`` ran and failed (its last error line is in the message); nothing was migrated."""


@dataclass(frozen=True)
class BackupResult:
    """A finished dump: where it is and how many bytes it holds."""

    path: Path
    size_bytes: int


def libpq_target(url: str) -> tuple[str, dict[str, str]]:
    """A libpq connection URI for SQLAlchemy ``url``, without its password, and the env to add.

    ``postgresql+psycopg://u:pw@h:5432/db?sslmode=require`` becomes
    ``("postgresql://u@h:5432/db?sslmode=require", {"PGPASSWORD": "pw"})``.

    Raises:
        UserError: ``url`` is not a PostgreSQL URL.
    """
    parsed: URL = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise UserError(f"not a PostgreSQL URL: {parsed.render_as_string(hide_password=True)}")
    env = {"PGPASSWORD": parsed.password} if parsed.password else {}
    plain = URL.create(
        "postgresql",
        username=parsed.username,
        host=parsed.host,
        port=parsed.port,
        database=parsed.database,
        query=parsed.query,
    )
    return plain.render_as_string(hide_password=False), env


def backup_path(directory: Path, database: str, now: datetime) -> Path:
    """``DIR/nahida-<database>-<UTC YYYYmmddTHHMMSSZ>.dump`` (``now`` must be aware)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in database) or "db"
    return directory / f"nahida-{safe}-{now.strftime('%Y%m%dT%H%M%SZ')}.dump"


def require_pg_dump(executable: str = "pg_dump") -> str:
    """The path of ``executable`` (a name on PATH or a path).

    Raises:
        PgDumpMissingError: it cannot be found; the message suggests ``--no-backup``.
    """
    found = shutil.which(executable)
    if found is None:
        raise PgDumpMissingError(
            f"{executable} not found: install the PostgreSQL client tools (the server's major "
            "version or newer) to back the ledger up first, point --pg-dump at it, or run "
            "`nahida migrate --no-backup` to migrate without a backup"
        )
    return found


def pg_dump(
    url: str,
    target: Path,
    *,
    executable: str = "pg_dump",
    timeout_s: float = DUMP_TIMEOUT_S,
) -> BackupResult:
    """Dump the database behind ``url`` to ``target`` (custom format), atomically.

    Args:
        url: the ledger's SQLAlchemy URL (``postgresql+psycopg://...``).
        target: the dump file to create (its directory is created, mode 0700).
        executable: ``pg_dump`` name (looked up on PATH) or path.
        timeout_s: seconds before the dump is killed and reported failed.

    Raises:
        PgDumpMissingError: ``executable`` cannot be found.
        BackupFailedError: ``pg_dump`` exited non-zero or timed out, or
            ``target`` already exists; no file is left at ``target``.
    """
    found = require_pg_dump(executable)
    if target.exists():
        raise BackupFailedError(f"backup file {target} already exists; not overwriting it")
    uri, extra = libpq_target(url)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)  # an earlier interrupted dump
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    argv = [found, "--format=custom", "--no-password", f"--file={partial}", f"--dbname={uri}"]
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, **extra},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise BackupFailedError(
            f"pg_dump did not finish in {timeout_s:g} s; nothing was migrated "
            "(run with --no-backup to migrate without a backup)"
        ) from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else f"exit code {done.returncode}"
        raise BackupFailedError(
            f"pg_dump failed: {why}; nothing was migrated (fix it, or run "
            "`nahida migrate --no-backup` to migrate without a backup)"
        )
    partial.rename(target)
    return BackupResult(target, target.stat().st_size)
