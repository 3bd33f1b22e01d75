"""The session inbox on every ledger adapter (DESIGN.md section 8, issue 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nahida_workers.core.records import InboxKind, InboxLimits, InboxMessage, InboxStatus
from nahida_workers.errors import InboxFullError, LedgerIntegrityError, NotFoundError
from tests.contract.ledger_world import World, make_world

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
    for i in range(2):
        post(w, message(f"b{i}", kind=InboxKind.BACKGROUND))
    with pytest.raises(InboxFullError, match="background"):
        post(w, message("b2", kind=InboxKind.BACKGROUND))
    assert len(ledger.inbox("s-1")) == 5
    roomy = InboxLimits(max_user=100, max_background=100, max_bytes=30)
    with pytest.raises(InboxFullError, match="bytes"):
        post(w, message("big", "x" * 25), roomy)
    assert "big" not in {m.message_id for m in ledger.inbox("s-1")}


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
