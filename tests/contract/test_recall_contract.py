"""The workspace-memory port (``ports.RecallLedger``) on every ledger adapter (issue 23 item 5).

Memory, SQLite and PostgreSQL: one item per id and per (workspace, content);
only active (verified) or pending items are written; a decision approves
(verified then) or rejects; uses count once per session; a refused write
rolls its whole transaction back; the counters read what was written.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from nahida_workers.core.memory import MemoryItem, MemoryKind, MemoryStatus, Provenance
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.recall import recall_ledger
from tests.contract.ledger_world import T0, at

WS = "/ws/repo"


def item(
    item_id: str,
    text: str = "Keep answers short.",
    *,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    workspace: str = WS,
) -> MemoryItem:
    return MemoryItem(
        item_id=item_id,
        workspace=workspace,
        kind=MemoryKind.PREFERENCE,
        text=text,
        provenance=Provenance.USER,
        source={"session_id": "s-1", "run_id": "r-1", "call_id": item_id, "quote": "short"},
        status=status,
        initial_status=status,
        reason="user-stated preference",
        created_at=T0,
        subject=None,
        verified_at=T0 if status is MemoryStatus.ACTIVE else None,
        expires_at=T0 + timedelta(days=90),
        root_id="s-1",
    )


def add(ledger: Any, *items: MemoryItem) -> list[tuple[MemoryItem, bool]]:
    recall = recall_ledger(ledger)
    with ledger.transaction() as tx:
        return [recall.add_item(tx, i) for i in items]


def test_an_item_is_written_and_read_back_whole(ledger: Any) -> None:
    ((stored, created),) = add(ledger, item("m-1"))
    assert created and stored == item("m-1")
    recall = recall_ledger(ledger)
    assert recall.get_item("m-1") == item("m-1")
    assert recall.items(workspace=WS) == [item("m-1")]
    assert recall.items(workspace="/other") == []


def test_the_same_write_again_returns_the_first(ledger: Any) -> None:
    add(ledger, item("m-1"))
    assert add(ledger, item("m-1")) == [(item("m-1"), False)]  # a recovery re-ran the call


def test_the_same_content_in_one_workspace_is_stored_once(ledger: Any) -> None:
    add(ledger, item("m-1"))
    ((found, created),) = add(ledger, item("m-2", "  keep   answers SHORT. "))
    assert not created and found.item_id == "m-1"
    assert [i.item_id for i in recall_ledger(ledger).items()] == ["m-1"]
    ((other, created),) = add(ledger, item("m-3", workspace="/ws/other"))
    assert created and other.item_id == "m-3"  # another workspace has its own memory


def test_a_rejected_item_stays_rejected_when_proposed_again(ledger: Any) -> None:
    add(ledger, item("m-1", status=MemoryStatus.PENDING))
    recall = recall_ledger(ledger)
    with ledger.transaction() as tx:
        recall.decide_item(tx, "m-1", MemoryStatus.REJECTED, at=at(5), by="alice")
    ((found, created),) = add(ledger, item("m-2", status=MemoryStatus.PENDING))
    assert not created and found.status is MemoryStatus.REJECTED


@pytest.mark.parametrize(
    "bad",
    [
        replace(item("m-9"), status=MemoryStatus.REJECTED, initial_status=MemoryStatus.REJECTED),
        replace(item("m-9"), verified_at=None),  # active, never verified
        replace(item("m-9"), initial_status=MemoryStatus.PENDING),
    ],
)
def test_bad_items_are_refused_and_roll_back(ledger: Any, bad: MemoryItem) -> None:
    recall = recall_ledger(ledger)
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        recall.add_item(tx, item("m-1"))
        recall.add_item(tx, bad)
    assert recall.items() == []  # the earlier write rolled back with it


def test_an_id_holding_other_content_is_refused(ledger: Any) -> None:
    add(ledger, item("m-1"))
    with pytest.raises(LedgerIntegrityError):
        add(ledger, item("m-1", "Something else."))


def test_approval_makes_a_pending_item_active_and_verified(ledger: Any) -> None:
    add(ledger, item("m-1", status=MemoryStatus.PENDING))
    recall = recall_ledger(ledger)
    later = T0 + timedelta(days=400)
    with ledger.transaction() as tx:
        done = recall.decide_item(
            tx, "m-1", MemoryStatus.ACTIVE, at=at(7), by="alice", expires_at=later
        )
    assert (done.status, done.verified_at, done.decided_by) == (MemoryStatus.ACTIVE, at(7), "alice")
    assert done.expires_at == later and done.initial_status is MemoryStatus.PENDING
    assert recall.get_item("m-1") == done


def test_a_decision_on_an_unknown_item_or_to_pending_is_refused(ledger: Any) -> None:
    recall = recall_ledger(ledger)
    with pytest.raises(NotFoundError), ledger.transaction() as tx:
        recall.decide_item(tx, "nope", MemoryStatus.REJECTED, at=at(1), by="a")
    add(ledger, item("m-1"))
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        recall.decide_item(tx, "m-1", MemoryStatus.PENDING, at=at(1), by="a")


def test_uses_count_once_per_session(ledger: Any) -> None:
    add(ledger, item("m-1"), item("m-2", "Use tabs."))
    recall = recall_ledger(ledger)
    with ledger.transaction() as tx:
        assert recall.record_uses(tx, "s-1", root_id="s-1", injected=["m-1", "m-2"], at=at(1)) == 2
    with ledger.transaction() as tx:  # the next turn, or a redelivery: nothing new
        assert recall.record_uses(tx, "s-1", root_id="s-1", injected=["m-1"], at=at(2)) == 0
        assert recall.record_uses(tx, "s-1", root_id="s-1", superseded=["m-1"], at=at(2)) == 1
    with ledger.transaction() as tx:
        assert recall.record_uses(tx, "s-2", root_id="s-2", injected=["m-1"], at=at(3)) == 1
    counts = recall.counts(workspace=WS)
    assert (counts["injected"], counts["superseded"]) == (3, 1)


def test_a_use_of_an_unknown_item_is_refused(ledger: Any) -> None:
    recall = recall_ledger(ledger)
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        recall.record_uses(tx, "s-1", root_id="s-1", injected=["ghost"], at=at(1))


def test_counters(ledger: Any) -> None:
    add(
        ledger,
        item("a-1"),
        item("p-1", "Pending one.", status=MemoryStatus.PENDING),
        item("p-2", "Pending two.", status=MemoryStatus.PENDING),
        item("p-3", "Pending three.", status=MemoryStatus.PENDING),
        item("x-1", "Elsewhere.", workspace="/ws/other"),
    )
    recall = recall_ledger(ledger)
    with ledger.transaction() as tx:
        recall.decide_item(tx, "p-1", MemoryStatus.ACTIVE, at=at(1), by="a")
        recall.decide_item(tx, "p-2", MemoryStatus.REJECTED, at=at(1), by="a")
        recall.record_uses(tx, "s-1", root_id="s-1", injected=["a-1", "p-1"], at=at(2))
    assert recall.counts(workspace=WS) == {
        "written_active": 1,
        "written_pending": 3,
        "approved": 1,
        "rejected": 1,
        "injected": 2,
        "superseded": 0,
    }
    assert recall.counts()["written_active"] == 2
    assert [i.item_id for i in recall.items(statuses=[MemoryStatus.PENDING])] == ["p-3"]
