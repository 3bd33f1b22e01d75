"""The inbox on PostgreSQL under contention: one connection per post, no lock on foreign keys.

A steering burst stalled ``nahida serve`` for 30 s: ``Inbox.post`` held the
session row lock and then read the session on a second pooled connection,
and ``FOR UPDATE`` made every outbox insert for the session wait on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import InboxKind, InboxLimits, InboxMessage, OutboxRecord
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.testing import FakeClock, ListTaskQueue
from tests.conftest import truncate
from tests.contract.ledger_world import make_world

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def one_connection(postgres_url: str, postgres_engine: Engine) -> Iterator[SqlLedger]:
    """A ledger whose pool is ONE connection: a second checkout fails within 1 s."""
    truncate(postgres_engine)
    engine = make_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout_s=1.0)
    yield SqlLedger(engine=engine)
    engine.dispose()


def test_a_post_that_reopens_a_done_session_needs_one_connection(one_connection: SqlLedger) -> None:
    ledger = one_connection
    world = make_world(ledger)
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, world.session_id, SessionStatus.DONE, at=T0)
    clock = FakeClock(T0)
    inbox = Inbox(ledger, MemoryLeaseStore(), Dispatcher(ledger, ListTaskQueue(), clock), clock)
    _message, created = inbox.post(world.session_id, "one more thing", message_id="m-1")
    session = ledger.get_session(world.session_id)
    assert created and session is not None and session.status is SessionStatus.QUEUED


def test_an_enqueue_in_progress_does_not_block_an_outbox_row_for_the_session(
    postgres_url: str, pg: SqlLedger
) -> None:
    world = make_world(pg)
    message = InboxMessage(
        message_id="m-1",
        session_id=world.session_id,
        kind=InboxKind.USER,
        text="steer",
        size_bytes=5,
        created_at=T0,
    )
    # Another process's connections, with a lock timeout: a wait is a failure, not a hang.
    other = SqlLedger(engine=make_engine(postgres_url, lock_timeout_ms=1000))
    inserted = threading.Event()
    failure: list[BaseException] = []

    def add_outbox() -> None:
        try:
            with other.transaction() as tx:
                other.add_outbox(
                    tx,
                    OutboxRecord(
                        outbox_id="o-1",
                        session_id=world.session_id,
                        task_name=RUN_SESSION,
                        created_at=T0,
                    ),
                )
            inserted.set()
        except BaseException as exc:
            failure.append(exc)

    try:
        with pg.transaction() as tx:
            pg.enqueue_inbox(tx, message, InboxLimits())  # holds the session row lock
            writer = threading.Thread(target=add_outbox)
            writer.start()
            writer.join(timeout=10)
            assert inserted.is_set(), f"the outbox insert waited on the enqueue: {failure}"
    finally:
        other.close()
    assert [o.outbox_id for o in pg.pending_outbox()] == ["o-1"]


def test_the_api_engine_sets_statement_and_lock_timeouts(postgres_url: str) -> None:
    engine = make_engine(postgres_url, statement_timeout_ms=1234, lock_timeout_ms=567)
    try:
        with engine.connect() as conn:
            names = ("statement_timeout", "lock_timeout")
            shown = [conn.exec_driver_sql(f"SHOW {name}").scalar() for name in names]
    finally:
        engine.dispose()
    assert shown == ["1234ms", "567ms"]
