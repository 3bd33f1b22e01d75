"""The raw psycopg path of the PostgreSQL ledger (issue 15): same values, same errors.

``pg_raw.dumps`` encodes with orjson where it can and falls back to the
standard library; ``jsonb`` stores values, so what is stored must equal what
the old ``json.dumps`` encoding stored.  Errors on the raw path must reach
the caller as the ledger's typed errors, and a connection the server dropped
must leave the pool.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger.sql import SqlLedger
from tests.contract.ledger_world import at, make_world, outbox

VALUES: list[Any] = [
    {"text": "ok", "n": 1, "f": 0.1, "big": 2**70, "neg": -(2**63), "none": None, "t": True},
    {"unicode": "é漢字🙂", "quote": 'a"b\\c', "ctl": "tab\tnl\n", "nested": [[1, [2, {"x": []}]]]},
    {1: "int key", "k": (1, 2)},  # non-string key and a tuple: orjson refuses, stdlib encodes
    {"floats": [1e16, 1e-7, 123456789.125, -0.0, 5e-324]},
    [{"created_at": datetime(2026, 12, 1, 8, 44, 8, 123456, tzinfo=UTC)}],
    [{"at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5, minutes=30)))}],
    [{"at": datetime(2026, 1, 2, 3, 4, 5)}],  # naive: no offset either way
]


def _stdlib(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))


@pytest.mark.parametrize("value", VALUES)
def test_dumps_encodes_the_same_json_value_as_the_standard_library(value: Any) -> None:
    assert json.loads(pg_raw.dumps(value)) == json.loads(_stdlib(value))


@pytest.mark.parametrize("value", VALUES)
def test_postgres_stores_the_same_jsonb_either_way(value: Any, postgres_ledger: SqlLedger) -> None:
    with postgres_ledger.engine.connect() as conn:
        same = conn.execute(
            text("SELECT CAST(:a AS jsonb) = CAST(:b AS jsonb)"),
            {"a": pg_raw.dumps(value), "b": _stdlib(value)},
        ).scalar()
    assert same is True


def test_a_connection_the_server_dropped_is_an_outage_then_leaves_the_pool(
    postgres_ledger: SqlLedger,
) -> None:
    w = make_world(postgres_ledger)
    assert postgres_ledger.get_session(w.session_id) is not None  # a pooled connection exists
    admin_engine = create_engine(postgres_ledger.engine.url, poolclass=NullPool)
    with admin_engine.begin() as admin:  # not a pooled connection: that one must die
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    outage = 0
    for _ in range(6):  # every pooled connection is dead: each fails once, then reconnects
        try:
            session = postgres_ledger.get_session(w.session_id)
        except LedgerUnavailableError:
            outage += 1
            continue
        assert session is not None and session.session_id == w.session_id
        break
    else:
        raise AssertionError("the ledger never recovered from dropped connections")
    assert outage >= 1


def test_the_outbox_mark_commits_without_waiting_for_the_wal_flush_and_only_itself(
    postgres_ledger: SqlLedger,
) -> None:
    """Issue 15: the mark is the one commit a server crash may lose (the outbox is
    at-least-once), so it skips the flush; the setting must not leak to the
    pooled connection's next statement, which must stay durable."""
    from nahida_workers.ledger.sql_records import _MARK_PUBLISHED_PG

    w = make_world(postgres_ledger)
    with postgres_ledger.transaction() as tx:
        postgres_ledger.add_outbox(tx, outbox("ob-1", w.session_id, created=at(1)))
    rows = postgres_ledger.raw(_MARK_PUBLISHED_PG, b_outbox_id="ob-1", b_at=at(2))
    assert [tuple(r) for r in rows] == [("ob-1", "off")]
    assert postgres_ledger.pending_outbox() == []
    postgres_ledger.engine.dispose()  # a single pooled connection: the one the mark used
    postgres_ledger.mark_published("ob-1", at=at(3))
    with pg_raw.autocommit(postgres_ledger.engine) as run:
        assert run("SHOW synchronous_commit", {}) == [("on",)]
