"""One contract suite for every ledger adapter (DESIGN.md sections 2 and 4).

The ``ledger`` fixture runs each test against the memory twin, SQLite and
PostgreSQL.  Every refusal is checked for its exact typed error AND for
leaving nothing behind: the refused write comes after valid writes of every
kind in the same transaction, and the ledger must read exactly as before.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, event, text

from nahida_workers.core.events import (
    EventType,
    ReasonCode,
    SessionStatus,
    TerminalState,
)
from nahida_workers.core.records import BatchRecord
from nahida_workers.errors import (
    CallNotCommittedError,
    DuplicateResultError,
    DuplicateSequenceError,
    EventAfterTerminalError,
    LedgerIntegrityError,
    NotFoundError,
    StaleEpochError,
)
from nahida_workers.ledger.migrate import alembic_config, upgrade
from nahida_workers.ledger.schema import metadata
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import Fence, Ledger, LedgerTx
from tests.contract.ledger_world import (
    at,
    make_world,
    outbox,
    receipt,
    refuse,
    run_record,
    session_record,
    terminal,
    tool_call,
    tool_result,
    user_input,
)
from tests.contract.ledger_world import (
    event as make_event,
)

DEADLINE_S = 5.0


def _finish(ledger: Ledger, tx: LedgerTx, run_id: str) -> None:
    ledger.finish_run(
        tx,
        run_id,
        state=TerminalState.COMPLETED,
        reason=ReasonCode.ANSWER_ACCEPTED,
        failure_code=None,
        ended_at=at(100),
    )


# -- sequences ---------------------------------------------------------------------------


def test_duplicate_sequence_is_refused_and_rolls_back(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"))
    refuse(w, DuplicateSequenceError, lambda tx: ledger.append(tx, [user_input(w.run_id, 2)]))
    # the same sequence twice inside one batch is a duplicate too
    refuse(
        w,
        DuplicateSequenceError,
        lambda tx: ledger.append(tx, [user_input(w.run_id, 3), user_input(w.run_id, 3)]),
    )
    assert [e.sequence for e in ledger.events(w.run_id)] == [1, 2]


def test_sequence_gap_is_refused_and_rolls_back(ledger: Ledger) -> None:
    w = make_world(ledger)
    refuse(w, LedgerIntegrityError, lambda tx: ledger.append(tx, [user_input(w.run_id, 3)]))
    refuse(
        w,
        LedgerIntegrityError,
        lambda tx: ledger.append(tx, [user_input(w.run_id, 2), user_input(w.run_id, 4)]),
    )
    w.append(user_input(w.run_id, 2))  # the next sequence is still accepted
    assert [e.sequence for e in ledger.events(w.run_id)] == [1, 2]


# -- calls and results -----------------------------------------------------------------


def test_result_without_committed_call_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    refuse(
        w,
        CallNotCommittedError,
        lambda tx: ledger.append(tx, [tool_result(w.run_id, 2, "c1")]),
    )
    # a result before its call in the same batch is not paired either
    refuse(
        w,
        CallNotCommittedError,
        lambda tx: ledger.append(
            tx, [tool_result(w.run_id, 2, "c1"), tool_call(w.run_id, 3, "c1")]
        ),
    )
    # a call committed in ANOTHER run does not count for this one
    w.add_run("r-2", started=at(5))
    with ledger.transaction(fence=w.fence) as tx:
        ledger.append(tx, [user_input("r-2", 1), tool_call("r-2", 2, "c1")])
    refuse(
        w,
        CallNotCommittedError,
        lambda tx: ledger.append(tx, [tool_result(w.run_id, 2, "c1")]),
    )


def test_call_and_result_in_one_batch_are_accepted(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1", "found it"))
    events = ledger.events(w.run_id)
    assert [(e.type, e.call_id) for e in events[1:]] == [
        (EventType.TOOL_CALL, "c1"),
        (EventType.TOOL_RESULT, "c1"),
    ]
    assert events[2].payload["content"] == "found it"


def test_second_result_for_a_call_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1"))
    refuse(
        w,
        DuplicateResultError,
        lambda tx: ledger.append(tx, [tool_result(w.run_id, 4, "c1")]),
    )
    w.append(tool_call(w.run_id, 4, "c2"))
    refuse(
        w,
        DuplicateResultError,
        lambda tx: ledger.append(
            tx, [tool_result(w.run_id, 5, "c2"), tool_result(w.run_id, 6, "c2")]
        ),
    )


def test_rules_after_a_rolled_back_write_see_only_the_committed_rows(ledger: Ledger) -> None:
    """Issue 15: an adapter that keeps its rule facts between writes (the memory
    twin folds only new rows) must forget what a rolled-back transaction wrote,
    even when later writes bring the run back to the same length."""
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"))
    with pytest.raises(RuntimeError), ledger.transaction(fence=w.fence, run_id=w.hint) as tx:
        ledger.append(tx, [tool_result(w.run_id, 3, "c1"), tool_call(w.run_id, 4, "c2")])
        ledger.append(tx, [tool_result(w.run_id, 5, "c2"), terminal(w.run_id, 6)])
        raise RuntimeError("roll back")
    # the same sequences again, other rows: none of the rolled-back ones count
    w.append(tool_call(w.run_id, 3, "c3"), tool_call(w.run_id, 4, "c4"))
    w.append(tool_result(w.run_id, 5, "c1"), tool_result(w.run_id, 6, "c3"))
    w.append(tool_call(w.run_id, 7, "c2"), tool_result(w.run_id, 8, "c2"))
    refuse(w, DuplicateResultError, lambda tx: ledger.append(tx, [tool_result(w.run_id, 9, "c3")]))
    assert [e.sequence for e in ledger.events(w.run_id)] == list(range(1, 9))


def test_second_call_with_one_id_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"))
    refuse(w, DuplicateResultError, lambda tx: ledger.append(tx, [tool_call(w.run_id, 3, "c1")]))
    refuse(
        w,
        DuplicateResultError,
        lambda tx: ledger.append(tx, [tool_call(w.run_id, 3, "c9"), tool_call(w.run_id, 4, "c9")]),
    )


# -- terminal ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["user_input", "tool_call", "terminal"])
def test_any_event_after_terminal_is_refused(ledger: Ledger, kind: str) -> None:
    w = make_world(ledger)
    w.append(terminal(w.run_id, 2))
    late = {
        "user_input": user_input(w.run_id, 3),
        "tool_call": tool_call(w.run_id, 3, "c1"),
        "terminal": terminal(w.run_id, 3),
    }[kind]
    refuse(w, EventAfterTerminalError, lambda tx: ledger.append(tx, [late]))


def _late(run_id: str, kind: str) -> tuple[list[Any], list[Any]]:
    """One late write of ``kind`` at sequence 4 (call ``c1`` was committed at 2)."""
    if kind == "receipt":
        return [], [receipt(run_id, "c1")]
    payloads: dict[str, tuple[EventType, dict[str, Any], str | None]] = {
        "user_input": (EventType.USER_INPUT, {"text": "late"}, None),
        "assistant_output": (EventType.ASSISTANT_OUTPUT, {"text": "late"}, None),
        "tool_call": (EventType.TOOL_CALL, {"name": "Read", "arguments": {}}, "c9"),
        "tool_result": (EventType.TOOL_RESULT, {"name": "Read", "status": "ok"}, "c1"),
        "provider_anomaly": (EventType.PROVIDER_ANOMALY, {"code": "empty_tool_turn"}, None),
        "control": (EventType.CONTROL, {"kind": "correction"}, None),
        "terminal": (EventType.TERMINAL, {"state": "completed", "reason": "answer_accepted"}, None),
    }
    kind_type, payload, call_id = payloads[kind]
    return [make_event(run_id, 4, kind_type, call_id=call_id, payload=payload)], []


@pytest.mark.parametrize(
    "kind",
    [t.value for t in EventType] + ["receipt"],
)
def test_every_event_type_and_a_receipt_after_terminal_is_refused(
    ledger: Ledger, kind: str
) -> None:
    """DESIGN.md section 2: *any* event after ``terminal`` -- each of the seven
    event types, and a receipt for a call left open -- is refused and rolls back."""
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"), terminal(w.run_id, 3))
    events, receipts = _late(w.run_id, kind)
    refuse(w, EventAfterTerminalError, lambda tx: ledger.append(tx, events, receipts))
    assert [e.sequence for e in ledger.events(w.run_id)] == [1, 2, 3]


def test_event_after_terminal_in_the_same_batch_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    refuse(
        w,
        EventAfterTerminalError,
        lambda tx: ledger.append(tx, [terminal(w.run_id, 2), user_input(w.run_id, 3)]),
    )
    assert [e.type for e in ledger.events(w.run_id)] == [EventType.USER_INPUT]


def test_finish_run_twice_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    with ledger.transaction(fence=w.fence) as tx:
        _finish(ledger, tx, w.run_id)
    finished = ledger.get_run(w.run_id)
    assert finished is not None and finished.terminal_state is TerminalState.COMPLETED
    refuse(w, EventAfterTerminalError, lambda tx: _finish(ledger, tx, w.run_id))
    assert ledger.get_run(w.run_id) == finished


# -- fencing ----------------------------------------------------------------------------


def test_write_with_a_stale_epoch_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    first = w.bump()
    second = w.bump()
    assert (first, second) == (1, 2)
    before = w.snapshot()
    entered = False
    with pytest.raises(StaleEpochError), ledger.transaction(fence=Fence(w.session_id, first)):
        entered = True
    assert not entered, "a stale fence must be refused on enter, before the body runs"
    # locking with the stale epoch after other writes rolls all of them back
    refuse(
        w, StaleEpochError, lambda tx: ledger.lock_session(tx, w.session_id, first), fenced=False
    )
    # an epoch from the future is not current either
    refuse(
        w,
        StaleEpochError,
        lambda tx: ledger.lock_session(tx, w.session_id, second + 1),
        fenced=False,
    )
    assert w.snapshot() == before
    w.append(user_input(w.run_id, 2))  # the current owner still writes


_STALE_WRITES: dict[str, Any] = {
    "result": lambda ledger, w, tx: ledger.append(tx, [tool_result(w.run_id, 3, "c1")]),
    "receipt": lambda ledger, w, tx: ledger.append(tx, (), [receipt(w.run_id, "c1")]),
    "result_and_receipt": lambda ledger, w, tx: ledger.append(
        tx, [tool_result(w.run_id, 3, "c1")], [receipt(w.run_id, "c1")]
    ),
    "seal": lambda ledger, w, tx: ledger.seal_run(
        tx,
        terminal(w.run_id, 3),
        state=TerminalState.COMPLETED,
        reason=ReasonCode.ANSWER_ACCEPTED,
        failure_code=None,
        ended_at=at(40),
    ),
    "finish": lambda ledger, w, tx: _finish(ledger, tx, w.run_id),
}


@pytest.mark.parametrize("write", sorted(_STALE_WRITES))
def test_an_owner_bumped_after_its_last_commit_writes_nothing(ledger: Ledger, write: str) -> None:
    """DESIGN.md section 4: a paused owner that wakes after losing its lease
    cannot write a single row -- on the commit point that follows one it made.

    The owner has committed under its epoch (on PostgreSQL with the run hint
    its run facts are now carried and the next commit point is one fenced
    statement); a new owner bumps; every kind of commit-point write the old
    owner then sends is refused with :class:`StaleEpochError` and leaves the
    ledger as it was.  Sequential, so it holds on every adapter (the
    concurrent orders are the PostgreSQL tests below).
    """
    w = make_world(ledger)
    old = w.bump()
    w.append(tool_call(w.run_id, 2, "c1"))  # the old owner's last successful commit point
    assert ledger.bump_epoch(w.session_id, at=at(20)) == old + 1  # the heir takes over
    before = w.snapshot()
    with (
        pytest.raises(StaleEpochError),
        ledger.transaction(fence=Fence(w.session_id, old), run_id=w.hint) as tx,
    ):
        _STALE_WRITES[write](ledger, w, tx)
    assert w.snapshot() == before, "a stale owner wrote"
    # the heir, at the new epoch, still writes the same facts
    w.epoch = old + 1
    w.append(tool_result(w.run_id, 3, "c1"))
    assert [e.epoch for e in ledger.events(w.run_id)] == [0, old, old + 1]


def test_events_and_receipts_record_the_fence_epoch(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.bump()
    epoch = w.bump()
    # the writer's own claim (epoch=99) is ignored: the fence decides
    call = tool_call(w.run_id, 2, "c1").model_copy(update={"epoch": 99})
    w.append(call, tool_result(w.run_id, 3, "c1"))
    w.put(receipt(w.run_id, "c1", epoch=99))
    events = ledger.events(w.run_id)
    assert [e.epoch for e in events] == [0, epoch, epoch]
    assert [r.epoch for r in ledger.receipts(w.run_id)] == [epoch]


def test_event_and_receipt_writes_need_a_fence(ledger: Ledger) -> None:
    w = make_world(ledger)
    refuse(
        w,
        LedgerIntegrityError,
        lambda tx: ledger.append(tx, [user_input(w.run_id, 2)]),
        fenced=False,
    )
    w.append(tool_call(w.run_id, 2, "c1"))
    refuse(
        w,
        LedgerIntegrityError,
        lambda tx: ledger.append(tx, (), [receipt(w.run_id, "c1")]),
        fenced=False,
    )
    refuse(w, LedgerIntegrityError, lambda tx: _finish(ledger, tx, w.run_id), fenced=False)


def test_a_fence_on_one_session_cannot_write_another_sessions_run(ledger: Ledger) -> None:
    a = make_world(ledger, "s-a", "r-a")
    b = make_world(ledger, "s-b", "r-b")
    b.append(tool_call(b.run_id, 2, "c1"))
    b_before = b.snapshot()
    refuse(a, LedgerIntegrityError, lambda tx: ledger.append(tx, [user_input("r-b", 3)]))
    refuse(a, LedgerIntegrityError, lambda tx: ledger.append(tx, (), [receipt("r-b", "c1")]))
    refuse(a, LedgerIntegrityError, lambda tx: _finish(ledger, tx, "r-b"))
    assert b.snapshot() == b_before


def test_bump_epoch_increments_by_one_and_sets_running(ledger: Ledger) -> None:
    w = make_world(ledger)
    session = ledger.get_session(w.session_id)
    assert session is not None and session.lease_epoch == 0
    assert session.status is SessionStatus.QUEUED
    for expected in (1, 2, 3):
        with ledger.transaction() as tx:
            ledger.set_session_status(tx, w.session_id, SessionStatus.WAITING, at=at(expected))
        assert ledger.bump_epoch(w.session_id, at=at(expected + 0.5)) == expected
        session = ledger.get_session(w.session_id)
        assert session is not None
        assert (session.lease_epoch, session.status) == (expected, SessionStatus.RUNNING)
    with pytest.raises(NotFoundError):
        ledger.bump_epoch("no-such-session", at=at(9))


# -- receipts ------------------------------------------------------------------------------


def test_receipt_for_an_uncommitted_call_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    refuse(w, CallNotCommittedError, lambda tx: ledger.append(tx, (), [receipt(w.run_id, "c1")]))


def test_second_receipt_for_a_call_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"), tool_call(w.run_id, 3, "c2"))
    w.put(receipt(w.run_id, "c1"))
    refuse(w, DuplicateResultError, lambda tx: ledger.append(tx, (), [receipt(w.run_id, "c1")]))
    refuse(
        w,
        DuplicateResultError,
        lambda tx: ledger.append(tx, (), [receipt(w.run_id, "c2"), receipt(w.run_id, "c2")]),
    )


def test_receipt_after_terminal_is_refused(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"), terminal(w.run_id, 3))
    refuse(w, EventAfterTerminalError, lambda tx: ledger.append(tx, (), [receipt(w.run_id, "c1")]))


def test_a_call_and_its_receipt_in_one_transaction_are_accepted(ledger: Ledger) -> None:
    w = make_world(ledger)
    with ledger.transaction(fence=w.fence) as tx:
        ledger.append(tx, [tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1")])
        ledger.append(tx, (), [receipt(w.run_id, "c1")])
    assert [r.call_id for r in ledger.receipts(w.run_id)] == ["c1"]


def test_receipts_read_back_in_write_order(ledger: Ledger) -> None:
    w = make_world(ledger)
    ids = ["c-z", "c-a", "c-m", "c-b"]
    w.append(*(tool_call(w.run_id, 2 + i, cid) for i, cid in enumerate(ids)))
    w.put(receipt(w.run_id, "c-z"), receipt(w.run_id, "c-a"))
    w.put(receipt(w.run_id, "c-m"))
    w.put(receipt(w.run_id, "c-b"))
    got = ledger.receipts(w.run_id)
    assert [r.call_id for r in got] == ids
    assert got[0] == receipt(w.run_id, "c-z", epoch=0)


# -- sessions, cancel, outbox, runs, event order ---------------------------------------


def test_create_session_with_a_known_idempotency_key_returns_the_existing_one(
    ledger: Ledger, request: pytest.FixtureRequest
) -> None:
    with ledger.transaction() as tx:
        first, created = ledger.create_session(tx, session_record("s-a", key="job:1"))
    assert created
    w_before = [s.session_id for s in ledger.sessions()]
    with ledger.transaction() as tx:
        again, created_again = ledger.create_session(
            tx, session_record("s-b", key="job:1", created=at(5))
        )
    assert created_again is False
    assert again == first
    assert [s.session_id for s in ledger.sessions()] == w_before == ["s-a"]
    assert ledger.get_session("s-b") is None


def test_open_session_writes_session_run_prompt_and_outbox_once_per_key(ledger: Ledger) -> None:
    """The dispatcher's one write: all four rows, or (known key) none of them."""
    first = outbox("o-1", "s-a")
    stored, created = ledger.open_session(
        session_record("s-a", key="job:1"),
        run_record("s-a", "r-1"),
        [user_input("r-1", 1, "survey")],
        first,
    )
    assert created and stored.session_id == "s-a"
    assert ledger.get_run("r-1") == run_record("s-a", "r-1")
    assert [(e.sequence, e.type, e.payload["text"]) for e in ledger.events("r-1")] == [
        (1, EventType.USER_INPUT, "survey")
    ]
    assert [o.outbox_id for o in ledger.pending_outbox()] == ["o-1"]
    again, created_again = ledger.open_session(
        session_record("s-b", key="job:1", created=at(5)),
        run_record("s-b", "r-2"),
        [user_input("r-2", 1, "again")],
        outbox("o-2", "s-b"),
    )
    assert created_again is False and again == stored
    assert ledger.get_session("s-b") is None and ledger.get_run("r-2") is None
    assert ledger.events("r-2") == []
    assert [o.outbox_id for o in ledger.pending_outbox()] == ["o-1"]


def test_sessions_and_batches_read_back_filtered_and_ordered(ledger: Ledger) -> None:
    batch = BatchRecord(batch_id="b-1", job_name="audit", created_at=at(1), spec={"k": 1})
    older = BatchRecord(batch_id="b-0", job_name="audit", created_at=at(0))
    with ledger.transaction() as tx:
        ledger.create_batch(tx, batch)
        ledger.create_batch(tx, older)
        for sid, created in (("s-c", 30), ("s-a", 10), ("s-b", 20)):
            record = session_record(sid, created=at(created))
            if sid != "s-b":
                record = record.model_copy(update={"batch_id": "b-1"})
            ledger.create_session(tx, record)
    assert [s.session_id for s in ledger.sessions()] == ["s-a", "s-b", "s-c"]
    assert [s.session_id for s in ledger.sessions(batch_id="b-1")] == ["s-a", "s-c"]
    ledger.bump_epoch("s-c", at=at(40))
    running = ledger.sessions(statuses=[SessionStatus.RUNNING])
    assert [s.session_id for s in running] == ["s-c"]
    assert [b.batch_id for b in ledger.batches()] == ["b-1", "b-0"]
    assert ledger.get_batch("b-1") == batch
    assert ledger.get_batch("b-9") is None
    assert ledger.get_session("s-a") == session_record("s-a", created=at(10)).model_copy(
        update={"batch_id": "b-1"}
    )


def test_request_cancel_keeps_the_first_time(ledger: Ledger) -> None:
    w = make_world(ledger)
    for seconds in (5, 9):
        with ledger.transaction() as tx:
            ledger.request_cancel(tx, w.session_id, at=at(seconds))
    session = ledger.get_session(w.session_id)
    assert session is not None and session.cancel_requested_at == at(5)
    with pytest.raises(NotFoundError), ledger.transaction() as tx:
        ledger.request_cancel(tx, "no-such-session", at=at(9))


def test_reopen_session_turns_only_a_done_session_queued(ledger: Ledger) -> None:
    w = make_world(ledger)
    for status in (SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING):
        with ledger.transaction() as tx:
            ledger.set_session_status(tx, w.session_id, status, at=at(1))
        with ledger.transaction() as tx:
            assert ledger.reopen_session(tx, w.session_id, at=at(2)) is False
        session = ledger.get_session(w.session_id)
        assert session is not None and session.status is status
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, w.session_id, SessionStatus.DONE, at=at(3))
    with ledger.transaction() as tx:
        assert ledger.reopen_session(tx, w.session_id, at=at(4)) is True
        assert ledger.reopen_session(tx, w.session_id, at=at(4)) is False  # seen in-transaction
    session = ledger.get_session(w.session_id)
    assert session is not None and session.status is SessionStatus.QUEUED
    with ledger.transaction() as tx:
        assert ledger.reopen_session(tx, "no-such-session", at=at(5)) is False


def test_set_session_status_only_from_writes_only_while_the_status_is_unchanged(
    ledger: Ledger,
) -> None:
    # The sweeper touches a session it read a while ago: one sealed done since
    # must stay done (a parent's wake counts its children done).
    w = make_world(ledger)
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, w.session_id, SessionStatus.DONE, at=at(1))
    with ledger.transaction() as tx:
        ledger.set_session_status(
            tx, w.session_id, SessionStatus.RUNNING, at=at(2), only_from=SessionStatus.RUNNING
        )
    session = ledger.get_session(w.session_id)
    assert session is not None and session.status is SessionStatus.DONE
    assert session.updated_at == at(1)
    with ledger.transaction() as tx:
        ledger.set_session_status(
            tx, w.session_id, SessionStatus.QUEUED, at=at(3), only_from=SessionStatus.DONE
        )
    session = ledger.get_session(w.session_id)
    assert session is not None and session.status is SessionStatus.QUEUED
    assert session.updated_at == at(3)


def test_outbox_add_pending_and_mark_published(ledger: Ledger) -> None:
    w = make_world(ledger)
    with ledger.transaction() as tx:
        ledger.add_outbox(tx, outbox("ob-late", w.session_id, created=at(30)))
        ledger.add_outbox(tx, outbox("ob-early", w.session_id, created=at(10)))
        ledger.add_outbox(tx, outbox("ob-mid", w.session_id, created=at(20)))
    assert [o.outbox_id for o in ledger.pending_outbox()] == ["ob-early", "ob-mid", "ob-late"]
    assert [o.outbox_id for o in ledger.pending_outbox(limit=2)] == ["ob-early", "ob-mid"]
    ledger.mark_published("ob-mid", at=at(40))
    assert [o.outbox_id for o in ledger.pending_outbox()] == ["ob-early", "ob-late"]


def test_runs_of_is_oldest_first(ledger: Ledger) -> None:
    w = make_world(ledger)  # r-1 started at T0
    w.add_run("r-3", started=at(30))
    w.add_run("r-2b", started=at(20))
    w.add_run("r-2a", started=at(20))
    assert [r.run_id for r in ledger.runs_of(w.session_id)] == ["r-1", "r-2a", "r-2b", "r-3"]
    assert ledger.runs_of("no-such-session") == []
    assert ledger.get_run("r-3") == run_record(w.session_id, "r-3", started=at(30))


def test_events_read_back_in_sequence_order(ledger: Ledger) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c2"), tool_call(w.run_id, 3, "c1"))
    w.append(tool_result(w.run_id, 4, "c1"))
    w.append(tool_result(w.run_id, 5, "c2"), terminal(w.run_id, 6))
    events = ledger.events(w.run_id)
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6]
    assert [(e.type.value, e.call_id) for e in events] == [
        ("user_input", None),
        ("tool_call", "c2"),
        ("tool_call", "c1"),
        ("tool_result", "c1"),
        ("tool_result", "c2"),
        ("terminal", None),
    ]
    assert events[3].created_at == at(4)


# -- payloads -------------------------------------------------------------------------------


def test_a_one_megabyte_result_is_stored_capped(ledger: Ledger) -> None:
    w = make_world(ledger)
    content = "H" * 10_000 + "m" * 980_000 + "T" * 10_000
    assert len(content.encode()) == 1_000_000
    w.append(tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1", content))
    stored = ledger.events(w.run_id)[2].payload
    capped = stored["content"]
    assert isinstance(capped, dict)
    assert capped["capped"] is True
    assert capped["size"] == 1_000_000
    assert capped["sha256"] == hashlib.sha256(content.encode()).hexdigest()
    assert capped["head"] and content.startswith(capped["head"]) and set(capped["head"]) == {"H"}
    assert capped["tail"] and content.endswith(capped["tail"]) and set(capped["tail"]) == {"T"}
    assert stored["name"] == "Read"  # the small keys are untouched


def test_small_payloads_are_stored_unchanged(ledger: Ledger) -> None:
    w = make_world(ledger)
    payload: dict[str, Any] = {
        "text": "héllo ✓",
        "nested": {"list": [1, 2.5, "x", None, True], "empty": {}},
        "flag": False,
    }
    w.append(user_input(w.run_id, 2).model_copy(update={"payload": payload}))
    assert ledger.events(w.run_id)[1].payload == payload


def test_credentials_in_payloads_are_redacted(ledger: Ledger) -> None:
    w = make_world(ledger)
    key = "sk-" + "a1B2c3D4e5" * 3
    payload = {"text": f"use {key} now", "deep": [{"k": key}]}
    w.append(user_input(w.run_id, 2).model_copy(update={"payload": payload}))
    stored = ledger.events(w.run_id)[1].payload
    assert stored == {"text": "use [REDACTED] now", "deep": [{"k": "[REDACTED]"}]}


def test_credentials_in_receipt_evidence_are_redacted(
    ledger: Ledger, request: pytest.FixtureRequest
) -> None:
    w = make_world(ledger)
    key = "sk-" + "Z9y8X7w6V5" * 3
    w.append(tool_call(w.run_id, 2, "c1"))
    w.put(receipt(w.run_id, "c1", evidence={"command": f"curl -H 'key: {key}'", "exit_code": 0}))
    evidence = ledger.receipts(w.run_id)[0].evidence
    assert evidence == {"command": "curl -H 'key: [REDACTED]'", "exit_code": 0}


def test_a_run_created_in_a_rolled_back_transaction_does_not_exist(
    ledger: Ledger, request: pytest.FixtureRequest
) -> None:
    w = make_world(ledger)
    with pytest.raises(RuntimeError), ledger.transaction(fence=w.fence) as tx:
        ledger.create_run(tx, run_record(w.session_id, "r-ghost", started=at(3)))
        raise RuntimeError("caller aborts the transaction")
    assert ledger.get_run("r-ghost") is None
    with pytest.raises(NotFoundError), ledger.transaction(fence=w.fence) as tx:
        ledger.append(tx, [user_input("r-ghost", 1)])


# -- real databases only ---------------------------------------------------------------------


def _wait_until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _blocked_on_lock(engine: Engine, fragment: str) -> bool:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        ).scalars()
        return any(fragment in q for q in rows)


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_fencing_is_real_under_concurrency(backend: str, request: pytest.FixtureRequest) -> None:
    """A holds a fenced transaction; B's bump_epoch waits for it; then e is stale.

    PostgreSQL: the ``FOR UPDATE`` row lock (B is seen waiting on a lock in
    pg_stat_activity).  SQLite: ``BEGIN IMMEDIATE`` serialises the writers.
    """
    ledger: SqlLedger = request.getfixturevalue(f"{backend}_ledger")
    w = make_world(ledger)
    e = w.bump()
    a_wrote, release_a = threading.Event(), threading.Event()
    b_returned = threading.Event()
    errors: list[BaseException] = []
    new_epoch: list[int] = []

    def owner_a() -> None:
        try:
            with ledger.transaction(fence=Fence(w.session_id, e)) as tx:
                ledger.append(tx, [user_input(w.run_id, 2, "from A")])
                a_wrote.set()
                assert release_a.wait(DEADLINE_S)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    def owner_b() -> None:
        try:
            new_epoch.append(ledger.bump_epoch(w.session_id, at=at(20)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            b_returned.set()

    thread_a = threading.Thread(target=owner_a)
    thread_a.start()
    assert a_wrote.wait(DEADLINE_S)
    thread_b = threading.Thread(target=owner_b)
    thread_b.start()
    try:
        if backend == "postgres":
            _wait_until(lambda: _blocked_on_lock(ledger.engine, "UPDATE sessions"), "B to block")
        assert not b_returned.wait(0.3), "bump_epoch returned while A still held the row lock"
    finally:
        release_a.set()
        thread_a.join(DEADLINE_S)
        thread_b.join(DEADLINE_S)
    assert not errors, errors
    assert new_epoch == [e + 1]
    events = ledger.events(w.run_id)
    assert [(ev.payload.get("text"), ev.epoch) for ev in events[1:]] == [("from A", e)]
    with pytest.raises(StaleEpochError), ledger.transaction(fence=Fence(w.session_id, e)) as tx:
        ledger.append(tx, [user_input(w.run_id, 3, "A again")])
    assert len(ledger.events(w.run_id)) == 2


def _hold_a_bump(ledger: SqlLedger, session_id: str) -> tuple[threading.Event, threading.Event]:
    """Run ``bump_epoch``'s own statement in a transaction that stays open until released.

    Returns (bumped, release): ``bumped`` is set once the bump's update ran
    (uncommitted); setting ``release`` commits it.
    """
    from nahida_workers.ledger.sql_records import _BUMP_EPOCH

    bumped, release = threading.Event(), threading.Event()

    def bump() -> None:
        with ledger.engine.begin() as conn:
            conn.execute(_BUMP_EPOCH, {"b_session_id": session_id, "b_at": at(30)})
            bumped.set()
            assert release.wait(DEADLINE_S)

    threading.Thread(target=bump, daemon=True).start()
    assert bumped.wait(DEADLINE_S)
    return bumped, release


def _commit_point(ledger: SqlLedger, w: Any, epoch: int, path: str, sequence: int) -> None:
    """One commit point of owner ``epoch`` by ``path`` (the ledger's PostgreSQL write paths)."""
    fence = Fence(w.session_id, epoch)
    if path == "seal":
        with ledger.transaction(fence=fence, run_id=w.run_id) as tx:
            ledger.seal_run(
                tx,
                terminal(w.run_id, sequence),
                state=TerminalState.COMPLETED,
                reason=ReasonCode.ANSWER_ACCEPTED,
                failure_code=None,
                ended_at=at(31),
            )
        return
    with ledger.transaction(fence=fence, run_id=None if path == "slow" else w.run_id) as tx:
        ledger.append(tx, [user_input(w.run_id, sequence, "stale owner")])


@pytest.mark.parametrize("path", ["first", "carried", "seal", "slow"])
def test_a_writer_blocked_behind_an_epoch_bump_sees_the_new_epoch_and_writes_nothing(
    path: str, postgres_ledger: SqlLedger
) -> None:
    """Issue 15: the other order of :func:`test_fencing_is_real_under_concurrency`.

    The bump holds its lock first; owner ``e``'s commit point, sent meanwhile,
    waits for it and must then refuse: a check against the snapshot its
    statement started with would still see ``e`` and write (READ COMMITTED
    takes a statement's snapshot at its start; only a lock the check orders
    against -- the row lock re-read, or a lock taken in an earlier statement
    -- sees the bump).  Every PostgreSQL write path of a commit point: the
    owner's first (lock and prefetch), a later one (one fenced statement on
    carried facts), the one-statement seal, and the plain fenced transaction.
    """
    ledger = postgres_ledger
    w = make_world(ledger)
    e = w.bump()
    if path in ("carried", "seal"):  # the owner has committed before: facts are carried
        with ledger.transaction(fence=Fence(w.session_id, e), run_id=w.run_id) as tx:
            ledger.append(tx, [user_input(w.run_id, 2, "owner e")])
    before = ledger.events(w.run_id)
    _, release = _hold_a_bump(ledger, w.session_id)
    outcome: list[BaseException | None] = []

    def stale_owner() -> None:
        try:
            _commit_point(ledger, w, e, path, len(before) + 1)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    writer = threading.Thread(target=stale_owner, daemon=True)
    writer.start()
    try:
        _wait_until(lambda: _blocked_on_lock(ledger.engine, "sessions"), "the writer to block")
        assert not outcome, "the commit point finished while the bump held its lock"
    finally:
        release.set()
    writer.join(DEADLINE_S)
    assert outcome and isinstance(outcome[0], StaleEpochError), outcome
    assert ledger.events(w.run_id) == before, "a stale owner wrote after the bump"
    assert ledger.get_session(w.session_id).lease_epoch == e + 1  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_open_session_with_one_key_writes_one_of_everything(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Eight dispatchers submit one scheduled job at once: one session, run, prompt, outbox row."""
    ledger: SqlLedger = request.getfixturevalue(f"{backend}_ledger")
    start = threading.Barrier(8)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            start.wait(DEADLINE_S)
            stored, created = ledger.open_session(
                session_record(f"s-{i}", key="schedule:nightly@2026-01-02"),
                run_record(f"s-{i}", f"r-{i}"),
                [user_input(f"r-{i}", 1, "nightly")],
                outbox(f"o-{i}", f"s-{i}"),
            )
            results.append((stored.session_id, created))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S * 2)
    assert not errors, errors
    winners = [sid for sid, created in results if created]
    assert len(winners) == 1 and {sid for sid, _ in results} == set(winners)
    (winner,) = winners
    assert [s.session_id for s in ledger.sessions()] == [winner]
    assert [r.run_id for r in ledger.runs_of(winner)] == [winner.replace("s-", "r-")]
    assert [o.session_id for o in ledger.pending_outbox()] == [winner]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_create_session_with_one_key_makes_one_session(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A inserts and holds its transaction; B's insert with the same key waits, then finds A's."""
    ledger: SqlLedger = request.getfixturevalue(f"{backend}_ledger")
    a_inserted, release_a = threading.Event(), threading.Event()
    b_started, b_returned = threading.Event(), threading.Event()
    results: dict[str, tuple[str, bool]] = {}
    errors: list[BaseException] = []

    def submit(name: str, hold: bool) -> None:
        try:
            if not hold:
                b_started.set()
            with ledger.transaction() as tx:
                stored, created = ledger.create_session(
                    tx, session_record(f"s-{name}", key="schedule:nightly@2026-01-01")
                )
                results[name] = (stored.session_id, created)
                if hold:
                    a_inserted.set()
                    assert release_a.wait(DEADLINE_S)
        except BaseException as exc:
            errors.append(exc)
        finally:
            if not hold:
                b_returned.set()

    thread_a = threading.Thread(target=submit, args=("a", True))
    thread_b = threading.Thread(target=submit, args=("b", False))
    thread_a.start()
    assert a_inserted.wait(DEADLINE_S)
    thread_b.start()
    try:
        assert b_started.wait(DEADLINE_S)
        if backend == "postgres":
            _wait_until(lambda: _blocked_on_lock(ledger.engine, "INSERT INTO sessions"), "B")
        assert not b_returned.wait(0.3), "B finished while A's insert was uncommitted"
    finally:
        release_a.set()
        thread_a.join(DEADLINE_S)
        thread_b.join(DEADLINE_S)
    assert not errors, errors
    # A's own ``created`` flag is checked by the sequential test above (it is
    # wrong on PostgreSQL, see PG_ROWCOUNT_BUG); here: one row, B got A's.
    assert results["a"][0] == "s-a"
    assert results["b"] == ("s-a", False)
    assert [s.session_id for s in ledger.sessions()] == ["s-a"]


# -- migrations ---------------------------------------------------------------------------


def _schema_diff(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


def _head() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def _revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _ddl_of_upgrade(engine: Engine) -> list[str]:
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        upgrade(engine)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return [s for s in statements if s.lstrip().split(" ", 1)[0].upper() in _DDL]


_DDL = {"CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE"}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_match_the_schema_and_upgrade_twice_is_a_no_op(
    backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """After upgrade(), alembic's autogenerate diff against schema.metadata is empty.

    Type comparison and server defaults are on; no difference is filtered out
    (at the time of writing there is no type-variant noise to ignore).
    """
    if backend == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'migrated.sqlite3'}")
        assert _ddl_of_upgrade(engine), "the first upgrade must create the schema"
    else:
        engine = request.getfixturevalue("postgres_engine")  # upgraded once by the fixture
    try:
        assert _revision(engine) == _head()
        assert _schema_diff(engine) == []
        assert _ddl_of_upgrade(engine) == [], "a second upgrade must not write anything"
        assert _revision(engine) == _head()
        assert _schema_diff(engine) == []
    finally:
        if backend == "sqlite":
            engine.dispose()


# -- hostile values: what one backend accepts, every backend accepts (issue 11 item 3) ----

NUL = "a\x00b"
SURROGATE = "x\ud800y"
LONG_ID = "call_" + "z" * 295  # a 300-character call id from the model
LONG_NAME = "Tool" * 75  # a 300-character tool name from the model
HOSTILE = {
    "text": f"model text {NUL} and {SURROGATE}",
    f"key{NUL}": [NUL, SURROGATE, {"nested": NUL}],
    "nan": float("nan"),
}


def _hostile_world(ledger: Ledger) -> tuple[Any, Any]:
    w = make_world(ledger)
    call = tool_call(w.run_id, 2, LONG_ID, name=LONG_NAME)
    call = call.model_copy(update={"payload": {**call.payload, "arguments": HOSTILE}})
    result = tool_result(w.run_id, 3, LONG_ID, content=f"printf output {NUL}{SURROGATE}")
    w.append(call, result)
    w.put(receipt(w.run_id, LONG_ID, evidence={"stdout_head": NUL, "odd": SURROGATE}))
    return w, call


def test_nul_bytes_surrogates_and_nan_are_stored_the_same_on_every_backend(
    ledger: Ledger,
) -> None:
    w, _ = _hostile_world(ledger)
    call, result = [e for e in ledger.events(w.run_id) if e.sequence > 1]
    assert call.payload["arguments"] == {
        "text": "model text a\ufffdb and x\ufffdy",
        "keya\ufffdb": ["a\ufffdb", "x\ufffdy", {"nested": "a\ufffdb"}],
        "nan": "nan",
    }
    assert result.payload["content"] == "printf output a\ufffdbx\ufffdy"
    (stored,) = ledger.receipts(w.run_id)
    assert stored.evidence == {"stdout_head": "a\ufffdb", "odd": "x\ufffdy"}


def test_an_over_long_call_id_and_tool_name_are_bounded_consistently(ledger: Ledger) -> None:
    w, sent = _hostile_world(ledger)
    call, result = [e for e in ledger.events(w.run_id) if e.sequence > 1]
    assert call.call_id == result.call_id == sent.call_id  # the same bounded id everywhere
    assert (
        call.call_id is not None and len(call.call_id) <= 200 and call.call_id.startswith("call_z")
    )
    (stored,) = ledger.receipts(w.run_id)
    assert stored.call_id == call.call_id and len(stored.tool_name) <= 200
    # the rules still hold on the bounded id: a second result is refused
    refuse(
        w,
        DuplicateResultError,
        lambda tx: ledger.append(tx, [tool_result(w.run_id, 4, LONG_ID)]),
    )


def test_user_input_with_nul_and_over_long_ids_is_stored_everywhere(ledger: Ledger) -> None:
    long_key = "k" * 400
    with ledger.transaction() as tx:
        ledger.create_batch(
            tx, BatchRecord(batch_id="b-1", job_name="job" * 100, created_at=at(0), spec={"p": NUL})
        )
        _stored, created = ledger.create_session(
            tx,
            session_record("s-nul", key=long_key).model_copy(
                update={"config": {"prompt": f"survey {NUL}"}, "workspace": f"/ws/{NUL}"}
            ),
        )
    assert created
    again = session_record("s-other", key=long_key)  # the same over-long key: the same session
    with ledger.transaction() as tx:
        found, created_again = ledger.create_session(tx, again)
    assert not created_again and found.session_id == "s-nul"
    session = ledger.get_session("s-nul")
    assert session is not None and session.config == {"prompt": "survey a\ufffdb"}
    (batch,) = ledger.batches()
    assert len(batch.job_name) <= 200 and batch.spec == {"p": "a\ufffdb"}
    w = make_world(ledger)
    with ledger.transaction(fence=w.fence) as tx:
        ledger.create_run(
            tx, run_record(w.session_id, "r-long").model_copy(update={"model": "m" * 300})
        )
    run = ledger.get_run("r-long")
    assert run is not None and len(run.model) <= 200


@pytest.mark.parametrize(
    "bad",
    [
        {"call_id": "c" * 300, "payload": {"name": "Read"}},
        {"call_id": "c1", "payload": {"text": "a\x00b"}},
    ],
    ids=["varchar-overflow", "nul-in-jsonb"],
)
def test_a_value_postgresql_refuses_is_a_data_error_never_an_outage(
    postgres_ledger: SqlLedger, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any]
) -> None:
    """Were a value to slip past the normalisation, PostgreSQL's refusal must not be
    retried as if the database were down (Celery retried it forever)."""
    from nahida_workers.core.events import Event
    from nahida_workers.errors import LedgerDataError
    from nahida_workers.ledger import sql as sql_module

    monkeypatch.setattr(sql_module, "storable_events", list)  # no normalisation
    w = make_world(postgres_ledger)
    raw = Event.model_construct(  # no validators either
        run_id=w.run_id, sequence=2, type=EventType.TOOL_CALL, epoch=0, created_at=at(2), **bad
    )
    exc = refuse(w, LedgerDataError, lambda tx: postgres_ledger.append(tx, [raw]))
    assert not getattr(exc, "retryable", True)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_stored_payload_of_the_wrong_shape_is_a_typed_error_on_read(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The read edge validates each payload against its event type's model."""
    from nahida_workers.errors import StoredPayloadError

    ledger: SqlLedger = request.getfixturevalue(f"{backend}_ledger")
    w = make_world(ledger)
    with ledger.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE agent_run_events SET payload_json = :bad "
                "WHERE run_id = :run AND sequence = 1"
            ),
            {"bad": '{"text": "go", "message_id": ["not", "an", "id"]}', "run": w.run_id},
        )
    with pytest.raises(StoredPayloadError, match="user_input"):
        ledger.events(w.run_id)
