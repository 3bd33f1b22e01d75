"""The child-session port (``ports.ChildLedger``) on every ledger adapter (issue 13)."""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import EventType, ReasonCode, SessionStatus, TerminalState
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.records import InboxKind, InboxMessage, InboxStatus, SessionRecord
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ports import Fence
from tests.contract.ledger_world import (
    T0,
    World,
    at,
    make_world,
    outbox,
    run_record,
    terminal,
    tool_call,
    user_input,
)

LIMITS = ChildLimits(max_depth=3, max_per_session=16, max_running_per_root=64)


def child_rows(parent: str, cid: str, *, depth: int = 1, root: str | None = None) -> tuple:
    root = root or parent
    session = SessionRecord(
        session_id=cid,
        parent_id=parent,
        workspace="/ws/x",
        config={"prompt": "child"},
        created_at=T0,
        updated_at=T0,
    )
    link = ChildLink(cid, parent, root, depth, {"ancestors": [root], "call_id": "c"})
    run = run_record(cid, f"run-{cid}")
    prompt = user_input(f"run-{cid}", 1, "child")
    return session, link, run, prompt, outbox(f"ob-{cid}", cid)


def spawn(w: World, cid: str, limits: ChildLimits = LIMITS, **kw: Any) -> SpawnOutcome:
    children = child_ledger(w.ledger)
    with w.ledger.transaction(fence=w.fence, run_id=w.hint) as tx:
        w.ledger.append(tx, [tool_call(w.run_id, 2, "c-" + cid)])
        return children.spawn_child(tx, *child_rows(w.session_id, cid, **kw), limits)


def test_spawn_commits_child_with_its_run_prompt_and_outbox(ledger: Any) -> None:
    w = make_world(ledger)
    assert spawn(w, "k1") is SpawnOutcome.CREATED
    child = ledger.get_session("k1")
    assert child.parent_id == "s-1" and child.status is SessionStatus.QUEUED
    assert [e.type for e in ledger.events("run-k1")] == [EventType.USER_INPUT]
    assert "ob-k1" in {o.outbox_id for o in ledger.pending_outbox()}
    link = child_ledger(ledger).link("k1")
    assert (link.parent_id, link.root_id, link.depth) == ("s-1", "s-1", 1)
    assert [s.session_id for s in child_ledger(ledger).children("s-1")] == ["k1"]
    assert child_ledger(ledger).link("s-1").root_id == "s-1"


def test_a_second_spawn_of_the_same_id_writes_nothing(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    assert spawn(w, "k1") is SpawnOutcome.CREATED
    with ledger.transaction(fence=w.fence) as tx:
        again = children.spawn_child(tx, *child_rows("s-1", "k1"), LIMITS)
    assert again is SpawnOutcome.EXISTS
    assert len(children.children("s-1")) == 1
    assert [o.outbox_id for o in ledger.pending_outbox()].count("ob-k1") == 1


def test_limits_refuse_and_write_nothing(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    tight = ChildLimits(max_depth=1, max_per_session=2, max_running_per_root=1)
    with ledger.transaction(fence=w.fence) as tx:
        assert children.spawn_child(tx, *child_rows("s-1", "k1"), tight) is SpawnOutcome.CREATED
        deep = children.spawn_child(tx, *child_rows("s-1", "k2", depth=2), tight)
        assert deep is SpawnOutcome.REFUSED_DEPTH
        assert children.spawn_child(tx, *child_rows("s-1", "k3"), tight).refused
    assert [s.session_id for s in children.children("s-1")] == ["k1"]
    assert ledger.get_session("k3") is None and ledger.runs_of("k3") == []
    with ledger.transaction(fence=w.fence) as tx:
        roomy = ChildLimits(max_depth=3, max_per_session=1, max_running_per_root=9)
        assert children.spawn_child(tx, *child_rows("s-1", "k4"), roomy) is (
            SpawnOutcome.REFUSED_COUNT
        )


def test_running_limit_counts_only_unfinished_children_of_the_root(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    one = ChildLimits(max_depth=3, max_per_session=9, max_running_per_root=1)
    with ledger.transaction(fence=w.fence) as tx:
        assert children.spawn_child(tx, *child_rows("s-1", "k1"), one) is SpawnOutcome.CREATED
        assert children.spawn_child(tx, *child_rows("s-1", "k2"), one) is (
            SpawnOutcome.REFUSED_RUNNING
        )
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "k1", SessionStatus.DONE, at=at(5))
    with ledger.transaction(fence=w.fence) as tx:
        assert children.spawn_child(tx, *child_rows("s-1", "k2"), one) is SpawnOutcome.CREATED


def completion(cid: str, parent: str = "s-1") -> InboxMessage:
    return InboxMessage(
        message_id=f"child-done:{cid}",
        session_id=parent,
        kind=InboxKind.BACKGROUND,
        text=f"{cid} done",
        size_bytes=7,
        next_turn=False,
        created_at=at(3),
    )


def test_park_then_completion_wakes_the_parent_once(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    spawn(w, "k1")
    with ledger.transaction(fence=w.fence) as tx:
        assert children.park(tx, "s-1", ["k1"], at=at(2))
    assert ledger.get_session("s-1").status is SessionStatus.WAITING
    assert children.link("s-1").awaiting == ("k1",)
    with ledger.transaction() as tx:  # the child's seal: done, then its post
        ledger.set_session_status(tx, "k1", SessionStatus.DONE, at=at(3))
        woke = children.post_child_completion(
            tx, completion("k1"), outbox("ob-wake", "s-1"), at=at(3)
        )
    assert woke and ledger.get_session("s-1").status is SessionStatus.QUEUED
    with ledger.transaction() as tx:
        again = children.post_child_completion(
            tx, completion("k1"), outbox("ob-2", "s-1"), at=at(4)
        )
    assert not again  # not waiting any more: no second wake-up, one message
    inbox = ledger.inbox("s-1", statuses=[InboxStatus.PENDING])
    assert [m.message_id for m in inbox] == ["child-done:k1"]
    assert {o.outbox_id for o in ledger.pending_outbox()} >= {"ob-wake"}
    assert "ob-2" not in {o.outbox_id for o in ledger.pending_outbox()}


def test_only_the_last_awaited_child_to_finish_wakes_the_parent(ledger: Any) -> None:
    """A wake per child would only park the parent again: the last one wakes it."""
    w = make_world(ledger)
    children = child_ledger(ledger)
    with w.ledger.transaction(fence=w.fence, run_id=w.hint) as tx:
        w.ledger.append(tx, [tool_call(w.run_id, 2, "c-k1"), tool_call(w.run_id, 3, "c-k2")])
        for cid in ("k1", "k2"):
            children.spawn_child(tx, *child_rows(w.session_id, cid), LIMITS)
    with ledger.transaction(fence=w.fence) as tx:
        assert children.park(tx, "s-1", ["k1", "k2"], at=at(2))
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "k2", SessionStatus.DONE, at=at(3))
        first = children.post_child_completion(
            tx, completion("k2"), outbox("wake-k2", "s-1"), at=at(3)
        )
    assert not first and ledger.get_session("s-1").status is SessionStatus.WAITING
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "k1", SessionStatus.DONE, at=at(4))
        last = children.post_child_completion(
            tx, completion("k1"), outbox("wake-k1", "s-1"), at=at(4)
        )
    assert last and ledger.get_session("s-1").status is SessionStatus.QUEUED
    pending = {o.outbox_id for o in ledger.pending_outbox()}
    assert "wake-k1" in pending and "wake-k2" not in pending
    assert len(ledger.inbox("s-1", statuses=[InboxStatus.PENDING])) == 2


def test_park_refuses_when_every_awaited_child_is_done(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    spawn(w, "k1")
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "k1", SessionStatus.DONE, at=at(2))
    with ledger.transaction(fence=w.fence) as tx:
        assert not children.park(tx, "s-1", ["k1"], at=at(3))
    assert ledger.get_session("s-1").status is not SessionStatus.WAITING


def test_park_refuses_a_session_whose_cancel_was_requested(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    spawn(w, "k1")
    with ledger.transaction() as tx:
        ledger.request_cancel(tx, "s-1", at=at(2))
    with ledger.transaction(fence=w.fence) as tx:
        assert not children.park(tx, "s-1", ["k1"], at=at(3))
    assert ledger.get_session("s-1").status is not SessionStatus.WAITING


def test_a_child_seal_and_its_post_roll_back_together(ledger: Any) -> None:
    w = make_world(ledger)
    children = child_ledger(ledger)
    spawn(w, "k1")
    epoch = ledger.bump_epoch("k1", at=at(2))
    try:
        with ledger.transaction(fence=Fence("k1", epoch)) as tx:
            ledger.seal_run(
                tx,
                terminal("run-k1", 2),
                state=TerminalState.COMPLETED,
                reason=ReasonCode.ANSWER_ACCEPTED,
                failure_code=None,
                ended_at=at(3),
            )
            children.post_child_completion(tx, completion("k1"), outbox("ob-w", "s-1"), at=at(3))
            raise RuntimeError("crash before commit")
    except RuntimeError:
        pass
    assert ledger.get_run("run-k1").terminal_state is None
    assert ledger.inbox("s-1") == []
