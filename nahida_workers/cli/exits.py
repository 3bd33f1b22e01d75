"""Exit codes of ``nahida`` and the one line each failure prints.

Every exception that reaches :func:`nahida_workers.cli.main.main` is mapped
here to one line on stderr and a documented exit code; a traceback is shown
only with ``--debug``.  Infrastructure failures name the service and the
setting to check.  This module imports nothing heavy at import time: the
classifiers import a library only when an exception could come from it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = ["CliState", "ExitCode", "classify", "one_line", "redact_url", "state"]


class ExitCode(IntEnum):
    """What ``nahida`` exits with (the table in docs/reference/exit-codes.md)."""

    #: Success: every session of a batch completed; a command did what it said.
    OK = 0
    #: A batch ended with a session that did not complete; ``watch`` timed out;
    #: an unexpected internal error (one line; ``--debug`` shows the traceback).
    NOT_COMPLETED = 1
    #: A usage or input error: unknown option or command, missing argument,
    #: invalid job file or setting, unknown or ambiguous id.  Nothing was done.
    USAGE = 2
    #: The database, broker or Redis is unreachable (the line names which and
    #: the setting); nothing was recorded.
    INFRA = 3
    #: The ledger recorded the request but the broker is unreachable: it will
    #: be delivered when the broker is back (beat's sweeper publishes it).
    #: Do not repeat the command.
    RECORDED = 4
    #: ``batch --timeout`` passed before every session finished; nothing is
    #: lost -- ``--resume BATCH_ID`` continues.
    TIMED_OUT = 5
    #: Interrupted (Ctrl-C); an interrupted batch is resumable.
    INTERRUPTED = 130


@dataclass
class CliState:
    """What the running command knows about where services are (for error lines)."""

    database_url: str | None = None
    broker_url: str | None = None
    redis_url: str | None = None
    local_db: str | None = None
    #: ``--create-db`` was given: a ``--db`` file's missing folder is created.
    create_db: bool = False


state = CliState()


def one_line(text: object, *, limit: int = 400) -> str:
    """``text`` on one line (whitespace runs as one space), at most ``limit`` chars."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def redact_url(url: str | None) -> str:
    """``url`` with any password replaced by ``***``."""
    if not url:
        return "(unset)"
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _module_of(exc: BaseException) -> str:
    return type(exc).__module__ or ""


def _is_a(exc: BaseException, module_prefix: str, *names: str) -> bool:
    return any(
        cls.__module__.startswith(module_prefix) and (not names or cls.__name__ in names)
        for cls in type(exc).__mro__
    )


def _createdb(name: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        url = make_url(state.database_url or "")
        host = f" -h {url.host}" if url.host else ""
        port = f" -p {url.port}" if url.port else ""
        user = f" -U {url.username}" if url.username else ""
    except Exception:
        host = port = user = ""
    return f"createdb{host}{port}{user} {name}"


def _database_line(detail: str) -> tuple[ExitCode, str]:
    if state.local_db:
        where = f"the SQLite ledger {state.local_db} (--db)"
    else:
        where = f"the ledger database {redact_url(state.database_url)} (NAHIDA_DATABASE_URL)"
    low = detail.lower()
    missing_db = re.search(r'database "([^"]+)" does not exist', detail)
    if missing_db:
        name = missing_db.group(1)
        return ExitCode.INFRA, (
            f"{where}: database {name!r} does not exist; create it with "
            f"`{_createdb(name)}`, then run `nahida migrate`"
        )
    if "no such table" in low or ("relation" in low and "does not exist" in low):
        return ExitCode.INFRA, f"{where} has no ledger schema: run `nahida migrate` first"
    if "unable to open database file" in low:
        return ExitCode.INFRA, f"{where}: cannot open the file ({one_line(detail, limit=200)})"
    return ExitCode.INFRA, f"{where} is unreachable: {one_line(detail, limit=240)}"


def _infra(exc: BaseException) -> tuple[ExitCode, str] | None:
    chain = _chain(exc)
    for item in chain:
        name = type(item).__name__
        if name in ("ArgumentError", "NoSuchModuleError") and _module_of(item).startswith(
            "sqlalchemy"
        ):
            return ExitCode.USAGE, (
                f"invalid setting NAHIDA_DATABASE_URL={redact_url(state.database_url)!s}: "
                f"{one_line(item, limit=160)} (expected postgresql+psycopg://USER@HOST:5432/DB "
                "or sqlite:///PATH)"
            )
        if name == "LedgerUnavailableError" or _is_a(
            item, "sqlalchemy", "OperationalError", "InterfaceError", "DatabaseError"
        ):
            orig = getattr(item, "orig", None)
            return _database_line(str(orig if orig is not None else item))
        if _is_a(item, "psycopg", "OperationalError") or _is_a(item, "sqlite3", "OperationalError"):
            return _database_line(str(item))
    for item in chain:
        if _is_a(item, "kombu", "OperationalError") or _is_a(item, "amqp"):
            return ExitCode.INFRA, (
                f"the broker {redact_url(state.broker_url)} (NAHIDA_BROKER_URL) is unreachable: "
                f"{one_line(item, limit=200)}"
            )
    for item in chain:
        if _is_a(item, "redis", "ConnectionError", "TimeoutError", "BusyLoadingError"):
            return ExitCode.INFRA, (
                f"Redis {redact_url(state.redis_url)} (NAHIDA_REDIS_URL) is unreachable: "
                f"{one_line(item, limit=200)}"
            )
        if isinstance(item, ValueError) and "Redis URL" in str(item):
            return ExitCode.USAGE, f"invalid Redis URL setting: {one_line(item, limit=200)}"
    for item in chain:
        if isinstance(item, ConnectionError | TimeoutError):
            return ExitCode.INFRA, f"a service is unreachable: {one_line(item, limit=240)}"
    return None


def is_delivery_failure(exc: BaseException) -> bool:
    """True when ``exc`` is the broker or Redis failing (not the ledger).

    Used after a ledger write committed: such a failure means "recorded, not
    yet delivered" (exit :attr:`ExitCode.RECORDED`), never "nothing happened".
    """
    code = _infra(exc)
    return code is not None and code[0] is ExitCode.INFRA and "ledger" not in code[1]


def classify(exc: BaseException) -> tuple[ExitCode, str]:
    """The exit code and the one error line for ``exc`` (no trailing newline).

    Order matters: the typed errors of :mod:`nahida_workers.errors` first,
    then typer's usage errors, then pydantic settings errors, then
    infrastructure failures found anywhere in the exception's chain.
    """
    from nahida_workers.errors import NahidaError, UserError

    if isinstance(exc, UserError):
        return ExitCode.USAGE, f"error: {one_line(exc, limit=2000)}"
    if _is_a(exc, "typer") and hasattr(exc, "format_message"):
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        return ExitCode.USAGE, f"error: {one_line(exc.format_message())}{hint}"
    if type(exc).__name__ == "ValidationError" and _module_of(exc).startswith("pydantic"):
        return ExitCode.USAGE, f"error: invalid setting {_first_setting_error(exc)}"
    found = _infra(exc)
    if found is not None:
        return found[0], f"error: {found[1]}"
    if isinstance(exc, NahidaError):
        return ExitCode.INFRA, f"error: {one_line(exc)}"
    if isinstance(exc, OSError) and exc.errno in (98, 13):  # EADDRINUSE, EACCES
        return ExitCode.USAGE, f"error: {one_line(exc, limit=300)}"
    if isinstance(exc, UnicodeError):
        return ExitCode.USAGE, f"error: input is not valid UTF-8: {one_line(exc, limit=200)}"
    return ExitCode.NOT_COMPLETED, (
        f"error: internal error: {type(exc).__name__}: {one_line(exc, limit=300)} "
        "(run again with --debug for the traceback)"
    )


def _first_setting_error(exc: Any) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(settings)"
    return f"NAHIDA_{where.upper()}: {one_line(first.get('msg'))}"


def print_error(line: str) -> None:
    """Write one error line to stderr, plain (no markup to eat brackets)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
