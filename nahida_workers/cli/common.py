"""What every ``nahida`` command shares: consoles, settings, the ledger, ids, JSON output.

Imports stay light at module level (``nahida --help`` must start in well
under half a second): rich, SQLAlchemy and the settings are
imported by the functions that need them.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nahida_workers.cli.exits import state

if TYPE_CHECKING:
    from rich.console import Console

    from nahida_workers.ledger.sql import SqlLedger
    from nahida_workers.settings import Settings

__all__ = [
    "DEFAULT_DB",
    "DbOpt",
    "JsonOpt",
    "LocalOpt",
    "MaxRunningOpt",
    "PriorityOpt",
    "err",
    "ledger_for",
    "out",
    "print_json",
    "settings_for",
]

DEFAULT_DB = Path("var/nahida.sqlite3")
LocalOpt = Annotated[
    bool, typer.Option("--local", help="Embedded mode: SQLite ledger file, in-process workers.")
]
DbOpt = Annotated[
    Path,
    typer.Option(
        "--db",
        help="SQLite ledger file for --local; its folder must exist (else exit 2), "
        "unless --create-db is given anywhere on the command line.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (full ids).")]
PriorityOpt = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=9,
        help="0-9, 9 most urgent: its sessions are taken from the queue first "
        "(default: the job's priority, else 5).",
    ),
]
MaxRunningOpt = Annotated[
    int | None,
    typer.Option(
        "--max-running",
        min=0,
        help="At most this many of its sessions run at once, 0 = no cap "
        "(default: the job's max_running, else NAHIDA_MAX_RUNNING_DEFAULT; "
        "an embedded batch: no cap).",
    ),
]


@cache
def out() -> Console:
    """The stdout console; pipes and CI logs get wide lines, never cut cells."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


@cache
def err() -> Console:
    """The stderr console (progress, notices)."""
    from rich.console import Console

    return Console(stderr=True, width=None if sys.stderr.isatty() else 200, highlight=False)


def settings_for(local: bool = False, db: Path = DEFAULT_DB, **overrides: Any) -> Settings:
    """The settings of this command; ``local`` points the ledger at the SQLite file ``db``.

    Records the service URLs so an infrastructure error can name them.

    Raises:
        pydantic.ValidationError: a malformed ``NAHIDA_*`` setting.
    """
    from nahida_workers.settings import EMBEDDED_URLS, load_settings

    if local:
        _db_folder(db)
        state.local_db = str(db)
        overrides = {**EMBEDDED_URLS, "database_url": f"sqlite:///{db.resolve()}", **overrides}
    settings = load_settings(**overrides)
    state.database_url = settings.database_url
    state.broker_url = settings.broker_url
    state.redis_url = settings.redis_url
    return settings


def _db_folder(db: Path) -> None:
    """Make the default ledger's folder; refuse another ``--db`` whose folder is missing.

    A typo in ``--db`` silently started an empty ledger elsewhere:
    its folder is created only with ``--create-db`` (:data:`state`
    ``create_db``, set by ``cli.main``).

    Raises:
        UserError: the folder of ``db`` does not exist and ``db`` is not the
            default ``var/nahida.sqlite3`` (exit 2).
    """
    from nahida_workers.errors import UserError

    if db.parent.is_dir():
        return
    if db != DEFAULT_DB and not state.create_db:
        raise UserError(
            f"--db {db}: the folder {db.parent} does not exist; check the path, or pass "
            "--create-db to start a new ledger there"
        )
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--db {db}: cannot create {db.parent}: {exc.strerror or exc}") from None


def ledger_for(settings: Settings, *, migrate: bool = False) -> SqlLedger:
    """A ledger on ``settings.database_url``; ``migrate`` runs Alembic first."""
    from nahida_workers.ledger.sql import SqlLedger, make_engine

    engine = make_engine(settings.database_url)
    if migrate:
        from nahida_workers.ledger.migrate import upgrade

        upgrade(engine)
    return SqlLedger(engine=engine, payload_max_bytes=settings.event_payload_max_bytes)


def print_json(data: Any) -> None:
    """One JSON document on stdout (plain, never wrapped or highlighted)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
