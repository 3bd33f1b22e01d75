"""Short ids, like git: tables show a unique prefix, every command takes one back.

Ids are 32 hex characters (uuid4).  A listing shows each id cut to the
shortest prefix, at least :data:`MIN_SHOWN` characters, that is unique among
the ids it shows; a command given a prefix of at least :data:`MIN_PREFIX`
characters resolves it against the whole ledger (one indexed ``LIKE 'p%'``
query on the primary key) and refuses an ambiguous one.  ``--json`` always
carries the full ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from nahida_workers.errors import NotFoundError, UserError

if TYPE_CHECKING:
    from nahida_workers.ledger.sql import SqlLedger

__all__ = ["MIN_PREFIX", "MIN_SHOWN", "resolve", "shortener"]

#: Shortest prefix a command accepts.
MIN_PREFIX = 4
#: Shortest prefix a table shows.
MIN_SHOWN = 8

Kind = Literal["session", "run", "batch", "team", "memory"]


def _common(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def shortener(ids: Iterable[str], *, minimum: int = MIN_SHOWN) -> dict[str, str]:
    """Map each id to its shortest prefix (>= ``minimum``) unique among ``ids``.

    Sorted, an id's longest shared prefix is with one of its two neighbours.
    """
    unique = sorted(set(ids))
    short: dict[str, str] = {}
    for index, value in enumerate(unique):
        need = minimum
        if index > 0:
            need = max(need, _common(value, unique[index - 1]) + 1)
        if index + 1 < len(unique):
            need = max(need, _common(value, unique[index + 1]) + 1)
        short[value] = value[:need]
    return short


def resolve(ledger: SqlLedger, kind: Kind, text: str) -> str:
    """The full id of the ``kind`` whose id is ``text`` or starts with it.

    Raises:
        UserError: ``text`` is shorter than :data:`MIN_PREFIX` and not an id,
            or it matches more than one id (the message lists some).
        NotFoundError: nothing matches.
    """
    from sqlalchemy import select

    from nahida_workers.ledger import schema

    column = {
        "session": schema.sessions.c.session_id,
        "run": schema.agent_runs.c.run_id,
        "batch": schema.batches.c.batch_id,
        "team": schema.teams.c.team_id,
        "memory": schema.memory_items.c.item_id,
    }[kind]
    text = text.strip()
    # Every API request about a session starts here: a whole id is the
    # ledger's hot read (raw on PostgreSQL, nothing compiled per call).
    if kind == "session" and ledger.get_session(text) is not None:
        return text
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    # The ledger's reader: autocommit on PostgreSQL, one round trip (no BEGIN, no ROLLBACK).
    with ledger.reader.connect() as conn:
        exact = kind != "session" and conn.execute(select(column).where(column == text)).first()
        if exact:
            return text
        if len(text) < MIN_PREFIX:
            raise NotFoundError(f"no {kind} {text} (a prefix needs {MIN_PREFIX}+ characters)")
        rows = conn.execute(
            select(column).where(column.like(f"{escaped}%", escape="\\")).limit(6)
        ).all()
    if not rows:
        raise NotFoundError(f"no {kind} {text}")
    if len(rows) > 1:
        some = ", ".join(str(r[0]) for r in rows[:5])
        raise UserError(f"ambiguous {kind} id prefix {text}: matches {some}; give more characters")
    return str(rows[0][0])
