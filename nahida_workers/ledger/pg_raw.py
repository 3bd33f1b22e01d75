"""The PostgreSQL hot path below SQLAlchemy: fixed statements on the raw psycopg connection.

A commit point is a handful of fixed statements (``pg_commit.py``).  Sent
through SQLAlchemy Core, each paid for an execution context, a compiled-cache
lookup, parameter processing and a result proxy -- about as much client CPU
as the database spent on the statement (``bench/loop``).  Here they go straight to
the psycopg connection of a pooled SQLAlchemy connection, server-side
prepared on first use (``prepare=True``), with the rows encoded by orjson.

Errors keep their SQLAlchemy shape: a psycopg error is wrapped with
:meth:`sqlalchemy.exc.DBAPIError.instance`, so the ledger maps it to its
typed errors exactly as before (``sql_base.integrity`` / ``database_error``),
and a connection the server dropped is invalidated in the pool.

psycopg and orjson are imported on first use: the SQLite-only CLI
(``nahida status --local``) never loads the driver (CLI start-up <= 0.5 s, ``bench/cli_startup``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Fixed",
    "Runner",
    "autocommit",
    "dumps",
    "execute",
    "in_transaction",
    "read",
    "runner",
]

_CURSORS = "nahida_pg_raw_cursors"

#: Runs one fixed statement (``%(name)s`` placeholders) and returns its rows.
Runner = Callable[[str, Mapping[str, Any]], list[tuple[Any, ...]]]


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def dumps(value: Any) -> str:
    """JSON text of ``value`` for a ``jsonb`` parameter.

    orjson when it can encode the value; otherwise (integers beyond 64 bits,
    non-string keys, lone surrogates) the standard library, so whatever the
    old encoder accepted is still accepted.  Both give the same JSON value,
    and ``jsonb`` stores values, not text.  Datetimes become ISO 8601.
    """
    import orjson

    try:
        return orjson.dumps(value, default=_default).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, default=_default)


def _driver_error() -> type[psycopg.Error]:
    import psycopg

    return psycopg.Error


def _wrapped(exc: psycopg.Error, sql: str, engine_or_conn: Any) -> BaseException:
    return DBAPIError.instance(
        sql,
        None,
        exc,
        _driver_error(),
        hide_parameters=True,
        dialect=engine_or_conn.dialect,
    )


class Fixed:
    """A SQLAlchemy Core statement compiled once for PostgreSQL, run raw with its binds.

    Bind parameters must carry a placeholder value (``bindparam("x", "")``) so
    expanding ``IN`` lists render; :meth:`params` overrides the named ones.
    One statement text (the ``sessions`` columns, the crash-counter
    expression) stays the single source for both the SQLite path through
    SQLAlchemy and this one.
    """

    def __init__(self, statement: ClauseElement) -> None:
        self._statement = statement
        self._compiled: tuple[str, dict[str, Any]] | None = None  # on first use: import time

    def _compile(self) -> tuple[str, dict[str, Any]]:
        if self._compiled is None:
            from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

            dialect = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]
            compiled = self._statement.compile(
                dialect=dialect, compile_kwargs={"render_postcompile": True}
            )
            self._compiled = (compiled.string, dict(compiled.params))
        return self._compiled

    @property
    def sql(self) -> str:
        """The statement's PostgreSQL text (``%(name)s`` placeholders)."""
        return self._compile()[0]

    def params(self, **values: Any) -> dict[str, Any]:
        """The statement's binds with ``values`` in place of the placeholders.

        Raises:
            KeyError: a name that is not a bind parameter of the statement.
        """
        defaults = self._compile()[1]
        unknown = values.keys() - defaults.keys()
        if unknown:
            raise KeyError(f"no bind parameter {sorted(unknown)}")
        return {**defaults, **values}


def execute(
    pooled: PoolProxiedConnection,
    sql: str,
    params: Mapping[str, Any] | Sequence[Any],
    *,
    named: bool = False,
) -> list[Any]:
    """Run one fixed statement that returns rows, prepared on the server; its rows.

    The cursors live in the pooled connection's ``info`` (one for tuple rows,
    one for named rows), reused from statement to statement: a new cursor
    copies the connection's adapters.

    Args:
        pooled: a checked-out pooled connection (its driver connection is psycopg's).
        named: rows as named tuples (attribute access, like SQLAlchemy rows).

    Raises:
        psycopg.Error: as the driver raised it (callers wrap it).
    """
    pg: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
    pair = pooled.info.get(_CURSORS)
    if pair is None or pair[0].connection is not pg:
        from psycopg.rows import namedtuple_row

        pair = pooled.info[_CURSORS] = (pg.cursor(), pg.cursor(row_factory=namedtuple_row))
    cur = pair[1] if named else pair[0]
    cur.execute(sql, params, prepare=True)
    return cur.fetchall()


def read(engine: Engine, fixed: Fixed, **values: Any) -> list[Any]:
    """Rows (named tuples) of a fixed statement run alone on an autocommit connection.

    Raises:
        sqlalchemy.exc.DBAPIError: (its subclasses) for a psycopg error.
    """
    params = fixed.params(**values)
    with _checkout(engine) as pooled:
        return execute(pooled, fixed.sql, params, named=True)


@contextmanager
def autocommit(engine: Engine) -> Iterator[Runner]:
    """A pooled psycopg connection in autocommit mode: each statement is its own commit.

    Yields:
        A :data:`Runner` on the connection.

    Raises:
        sqlalchemy.exc.DBAPIError: (its subclasses) for any psycopg error of the block.
    """
    with _checkout(engine) as pooled:
        yield lambda sql, params: execute(pooled, sql, params)


@contextmanager
def _checkout(engine: Engine) -> Iterator[PoolProxiedConnection]:
    driver_error = _driver_error()
    try:
        raw = engine.raw_connection()
    except driver_error as exc:  # the server is unreachable
        raise _wrapped(exc, "", engine) from exc
    pg: psycopg.Connection[Any] = raw.driver_connection  # type: ignore[assignment]
    try:
        pg.autocommit = True
        yield raw
    except driver_error as exc:
        if pg.closed or pg.broken:
            raw.invalidate(exc)
        raise _wrapped(exc, "", engine) from exc
    finally:
        if not pg.closed and not pg.broken:
            try:
                pg.autocommit = False  # the pool hands out transactional connections
            except driver_error as exc:
                raw.invalidate(exc)
        raw.close()


def runner(conn: Connection) -> Runner:
    """A :data:`Runner` on the psycopg connection of ``conn``, inside its transaction."""
    return lambda sql, params: in_transaction(conn, sql, params)


def in_transaction(
    conn: Connection, sql: str, params: Mapping[str, Any] | Sequence[Any]
) -> list[tuple[Any, ...]]:
    """Run one fixed statement on the psycopg connection of ``conn``, in its transaction.

    Raises:
        sqlalchemy.exc.DBAPIError: (its subclasses) for a psycopg error; a
            dropped connection is invalidated.
    """
    pooled = conn.connection
    pg: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
    try:
        return execute(pooled, sql, params)
    except _driver_error() as exc:
        if pg.closed or pg.broken:
            conn.invalidate(exc)
        raise _wrapped(exc, sql, conn) from exc
