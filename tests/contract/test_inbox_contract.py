"""The session inbox on every ledger adapter (DESIGN.md section 8, issue 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nahida_workers.core.events import EventType, ReasonCode, SessionStatus, TerminalState
from nahida_workers.core.records import InboxKind, InboxLimits, InboxMessage, InboxStatus
from nahida_workers.errors import (
    EventAfterTerminalError,
    InboxFullError,
    LedgerIntegrityError,
    NotFoundError,
    StaleEpochError,
)
from nahida_workers.ledger import pg_raw
from nahida_workers.ledger.pg_commit import Sealed, seal_pg
from tests.contract.ledger_world import (
    World,
    make_world,
    terminal,
    tool_call,
    tool_result,
    user_input,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = InboxLimits(max_user=3, max_background=2, max_bytes=100)


def message(
    mid: str, text: str = "hi", kind: InboxKind = InboxKind.USER, **kw: Any
) -> InboxMessage:
    return InboxMessage(
        message_id=mid,
        session_id=kw.pop("session_id", "s-1"),
        kind=kind,
        text=text,
        size_bytes=len(text.encode()),
        created_at=T0,
        **kw,
    )


def post(w: World, m: InboxMessage, limits: InboxLimits = LIMITS) -> tuple[InboxMessage, bool]:
    with w.ledger.transaction() as tx:
        return w.ledger.enqueue_inbox(tx, m, limits)  # type: ignore[no-any-return]


def test_enqueue_is_idempotent_by_message_id(ledger: Any) -> None:
    w = make_world(ledger)
    _first, created = post(w, message("m1", "turn left"))
    again, created_again = post(w, message("m1", "a different text"))
    assert created and not created_again
    assert again.text == "turn left"
    assert [m.message_id for m in ledger.inbox("s-1")] == ["m1"]


def test_limits_refuse_and_write_nothing(ledger: Any) -> None:
    w = make_world(ledger)
    for i in range(3):
        post(w, message(f"u{i}"))
    with pytest.raises(InboxFullError, match="3 pending user"):
        post(w, message("u3"))
    assert len(ledger.inbox("s-1")) == 3
    roomy = InboxLimits(max_user=100, max_background=100, max_bytes=30)
    with pytest.raises(InboxFullError, match="bytes"):
        post(w, message("big", "x" * 25), roomy)
    assert "big" not in {m.message_id for m in ledger.inbox("s-1")}


def test_facts_are_never_refused_and_never_count_against_steering(ledger: Any) -> None:
    """Runtime facts (child completions, ...) pass every steering limit and take none of it."""
    w = make_world(ledger)
    tight = InboxLimits(max_user=2, max_background=1, max_bytes=40)
    for i in range(5):  # well past max_background and max_bytes: facts are never dropped
        post(w, message(f"fact{i}", "f" * 30, kind=InboxKind.BACKGROUND), tight)
    facts = [m for m in ledger.inbox("s-1") if m.kind is InboxKind.BACKGROUND]
    assert len(facts) == 5
    # 150 bytes of facts pending, yet steering still has its whole 40 bytes
    post(w, message("steer", "s" * 40), tight)
    with pytest.raises(InboxFullError, match="bytes"):
        post(w, message("more", "m"), tight)  # only steering bytes count against the cap
    post(w, message("fact5", "f" * 30, kind=InboxKind.BACKGROUND), tight)  # still accepted
    assert {m.message_id for m in ledger.inbox("s-1")} >= {"steer", "fact5"}


def test_unknown_session_is_refused(ledger: Any) -> None:
    w = make_world(ledger)
    with pytest.raises(NotFoundError):
        post(w, message("m", session_id="nope"))


def test_claim_then_acknowledge_under_the_fence(ledger: Any) -> None:
    w = make_world(ledger)
    post(w, message("m1"))
    post(w, message("m2"))
    with ledger.transaction(fence=w.fence) as tx:
        assert tx.pending_inbox == 2
        ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)
    claimed = {m.message_id: m for m in ledger.inbox("s-1")}
    assert claimed["m1"].status is InboxStatus.CLAIMED and claimed["m1"].claimed_run_id == w.run_id
    assert claimed["m2"].status is InboxStatus.PENDING
    with pytest.raises(LedgerIntegrityError), ledger.transaction(fence=w.fence) as tx:
        ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)  # not pending any more
    with ledger.transaction(fence=w.fence) as tx:
        assert ledger.acknowledge_inbox(tx, w.run_id, at=T0) == 1
    statuses = {m.message_id: m.status for m in ledger.inbox("s-1")}
    assert statuses == {"m1": InboxStatus.ACKNOWLEDGED, "m2": InboxStatus.PENDING}
    with ledger.transaction(fence=w.fence) as tx:
        assert ledger.acknowledge_inbox(tx, w.run_id, at=T0) == 0  # acknowledged once


def test_claiming_needs_the_current_fence(ledger: Any) -> None:
    w = make_world(ledger)
    post(w, message("m1"))
    stale = w.fence
    w.bump()
    from nahida_workers.errors import StaleEpochError

    with pytest.raises(StaleEpochError), ledger.transaction(fence=stale) as tx:
        ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)
    assert ledger.inbox("s-1")[0].status is InboxStatus.PENDING


def test_after_run_messages_are_not_counted_as_next_turn(ledger: Any) -> None:
    w = make_world(ledger)
    post(w, message("later", next_turn=False))
    with ledger.transaction(fence=w.fence) as tx:
        assert tx.pending_inbox == 0


# -- the seal: terminal event + run row + inbox acknowledgement + session done -------


def seal(w: World, sequence: int, *, fence: Any = None) -> None:
    """Seal ``w``'s run as the runtime does (the fast path when the world uses hints)."""
    with w.ledger.transaction(fence=fence or w.fence, run_id=w.hint) as tx:
        w.ledger.seal_run(
            tx,
            terminal(w.run_id, sequence),
            state=TerminalState.COMPLETED,
            reason=ReasonCode.ANSWER_ACCEPTED,
            failure_code=None,
            ended_at=T0,
        )


def test_seal_writes_its_facts_together(ledger: Any) -> None:
    w = make_world(ledger)
    post(w, message("m1"))
    post(w, message("m2"))
    with ledger.transaction(fence=w.fence, run_id=w.hint) as tx:
        ledger.append(tx, [user_input(w.run_id, 2, "m1's text")])
        ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)
    w.append(tool_call(w.run_id, 3, "c1"))  # the owner's facts are carried from here
    w.append(tool_result(w.run_id, 4, "c1"))
    with ledger.transaction() as tx:  # `nahida cancel` from another process
        ledger.request_cancel(tx, "s-1", at=T0)
    assert ledger.get_session("s-1").cancel_requested_at is not None
    seal(w, 5)
    assert [e.type for e in ledger.events(w.run_id)][-1] is EventType.TERMINAL
    run = ledger.get_run(w.run_id)
    assert (run.terminal_state, run.terminal_reason, run.ended_at) == (
        TerminalState.COMPLETED,
        ReasonCode.ANSWER_ACCEPTED,
        T0,
    )
    statuses = {m.message_id: m.status for m in ledger.inbox("s-1")}
    assert statuses == {"m1": InboxStatus.ACKNOWLEDGED, "m2": InboxStatus.PENDING}
    assert ledger.get_session("s-1").status is SessionStatus.DONE
    assert ledger.get_session("s-1").cancel_requested_at is None  # consumed by the seal


def test_seal_under_a_stale_fence_writes_nothing(ledger: Any) -> None:
    w = make_world(ledger)
    post(w, message("m1"))
    with ledger.transaction(fence=w.fence, run_id=w.hint) as tx:
        ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)
    w.append(tool_call(w.run_id, 2, "c1"))
    w.append(tool_result(w.run_id, 3, "c1"))
    old = w.fence
    w.bump()  # a new owner
    before = (w.snapshot(), ledger.inbox("s-1"))
    with pytest.raises(StaleEpochError):
        seal(w, 4, fence=old)
    assert (w.snapshot(), ledger.inbox("s-1")) == before


def test_a_second_seal_is_refused_and_writes_nothing(ledger: Any) -> None:
    w = make_world(ledger)
    w.append(tool_call(w.run_id, 2, "c1"))
    seal(w, 3)
    before = w.snapshot()
    with pytest.raises(EventAfterTerminalError):
        seal(w, 4)
    assert w.snapshot() == before


def test_seal_statement_is_all_or_nothing_on_postgres(postgres_ledger: Any) -> None:
    """The one-statement seal checks the epoch and the open run itself (the backstop)."""
    w = make_world(postgres_ledger)
    post(w, message("m1"))
    with postgres_ledger.transaction(fence=w.fence) as tx:
        postgres_ledger.claim_inbox(tx, w.run_id, ["m1"], at=T0)
    run = {
        "run_id": w.run_id,
        "state": "completed",
        "reason": "answer_accepted",
        "failure_code": None,
        "ended_at": T0,
    }
    row = postgres_ledger.event_row(terminal(w.run_id, 2), 0)
    with postgres_ledger.engine.begin() as conn:
        stale = seal_pg(pg_raw.runner(conn), "s-1", 7, run, [row])
    assert stale == Sealed(epoch=0, sealed=False, events_written=0)
    assert postgres_ledger.get_session("s-1").status is not SessionStatus.DONE
    assert ledger_inbox_status(postgres_ledger, "m1") is InboxStatus.CLAIMED
    with postgres_ledger.engine.begin() as conn:
        assert seal_pg(pg_raw.runner(conn), "s-1", 0, run, [row]) == Sealed(0, True, 1)
    with postgres_ledger.engine.begin() as conn:
        again = seal_pg(pg_raw.runner(conn), "s-1", 0, run, [{**row, "sequence": 3}])
    assert again == Sealed(0, False, 0)  # the run row is sealed: nothing else written
    assert len(postgres_ledger.events(w.run_id)) == 2
    assert ledger_inbox_status(postgres_ledger, "m1") is InboxStatus.ACKNOWLEDGED
    assert postgres_ledger.get_session("s-1").status is SessionStatus.DONE


def ledger_inbox_status(ledger: Any, message_id: str) -> InboxStatus:
    return {m.message_id: m.status for m in ledger.inbox("s-1")}[message_id]
