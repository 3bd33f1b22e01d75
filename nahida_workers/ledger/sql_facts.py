"""Reading the facts a ledger write is checked against, on any SQL dialect.

:func:`exact_facts`: one ``UNION ALL`` query gives the highest sequence, the
terminal event, and the events and receipts of the call ids a write names.
The PostgreSQL commit-point fast path lives in :mod:`~nahida_workers.ledger.pg_commit`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, literal_column, null, select, union_all

from nahida_workers.core.events import EventType
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.rules import RunFacts

__all__ = ["exact_facts"]


def exact_facts(
    conn: Connection, run_id: str, ids: Sequence[str], *, base: bool = True
) -> RunFacts:
    """The run's facts for ``ids`` (and, with ``base``, its head and terminal).

    One ``UNION ALL`` round trip on any dialect.
    """
    ev, rc = t.agent_run_events.c, t.agent_execution_receipts.c
    branches = []
    if base:
        branches += [
            select(
                literal_column("'max'").label("k"),
                func.max(ev.sequence).label("n"),
                null().label("cid"),
                null().label("et"),
            ).where(ev.run_id == run_id),
            select(literal_column("'term'"), ev.sequence, null(), null()).where(
                ev.run_id == run_id, ev.event_type == EventType.TERMINAL.value
            ),
        ]
    if ids:
        branches += [
            select(literal_column("'ev'"), ev.sequence, ev.call_id, ev.event_type).where(
                ev.run_id == run_id, ev.call_id.in_(ids)
            ),
            select(literal_column("'rc'"), null(), rc.call_id, null()).where(
                rc.run_id == run_id, rc.call_id.in_(ids)
            ),
        ]
    facts = RunFacts()
    if not branches:
        return facts
    for kind, number, call_id, event_type in conn.execute(union_all(*branches)):
        if kind == "max":
            facts.max_sequence = number or 0
        elif kind == "term":
            facts.has_terminal = True
        elif kind == "rc":
            facts.receipts.add(call_id)
        elif event_type == EventType.TOOL_CALL.value:
            facts.calls.add(call_id)
        else:
            facts.results.add(call_id)
    return facts
