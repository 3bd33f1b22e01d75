"""The team port (``ports.TeamLedger``) on every ledger adapter: memory, SQLite, PostgreSQL.

DESIGN.md section 8: a claim is one conditional update, fenced by the
claimant's epoch; a task whose dependencies are not done cannot be claimed;
a stale claim is released only while it is the same claim and still stale;
team mail is never refused for space and is idempotent by id.
"""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import InboxKind, InboxMessage, InboxStatus
from nahida_workers.core.teams import (
    LogAction,
    TaskLogEntry,
    TaskStatus,
    TeamMember,
    TeamRole,
    TeamTask,
    WaitingOn,
)
from nahida_workers.errors import LedgerIntegrityError, StaleEpochError
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.ports import Fence
from tests.contract.ledger_world import T0, World, at, make_world

TEAM = "s-lead"


def worlds(ledger: Any) -> tuple[World, World, World]:
    """A lead and two members (sessions with an open run each), in one team."""
    lead = make_world(ledger, TEAM, "r-lead")
    a = make_world(ledger, "s-a", "r-a")
    b = make_world(ledger, "s-b", "r-b")
    teams = team_ledger(ledger)
    with ledger.transaction() as tx:
        teams.lock_team(tx, TEAM, lead_id=TEAM, root_id=TEAM, at=T0)
        for sid, name in (("s-a", "worker"), ("s-b", "worker-2")):
            teams.add_member(tx, TeamMember(TEAM, sid, TeamRole.MEMBER, name, "worker", T0, "w"))
    return lead, a, b


def task(task_id: str, *deps: str, seq: int = 0) -> TeamTask:
    return TeamTask(
        team_id=TEAM,
        task_id=task_id,
        title=f"title {task_id}",
        description=f"about {task_id}",
        depends_on=deps,
        created_by=f"r-lead:c-{task_id}",
        created_at=T0,
        updated_at=T0,
        seq=seq,
        root_id=TEAM,
    )


def add_tasks(ledger: Any, *tasks: TeamTask) -> None:
    teams = team_ledger(ledger)
    with ledger.transaction() as tx:
        teams.lock_team(tx, TEAM, lead_id=TEAM, root_id=TEAM, at=T0)
        for i, t in enumerate(tasks, start=1):
            teams.insert_task(tx, TeamTask(**{**t.__dict__, "seq": i}))


def claim(w: World, task_id: str, *, renew: bool = False, epoch: int | None = None) -> bool:
    teams = team_ledger(w.ledger)
    fence = Fence(w.session_id, w.epoch if epoch is None else epoch)
    with w.ledger.transaction(fence=fence) as tx:
        return teams.claim_task(tx, TEAM, task_id, w.session_id, fence.epoch, renew=renew, at=at(5))


def status(ledger: Any, task_id: str) -> tuple[TaskStatus, str | None]:
    state = team_ledger(ledger).read_team(TEAM)
    found = state.task(task_id)
    return found.status, found.owner


def test_a_team_reads_back_with_its_lead_members_and_tasks_in_order(ledger: Any) -> None:
    worlds(ledger)
    add_tasks(ledger, task("t1"), task("t2", "t1"))
    state = team_ledger(ledger).read_team(TEAM)
    assert (state.team_id, state.lead_id, state.root_id) == (TEAM, TEAM, TEAM)
    assert [(m.member_id, m.role, m.name) for m in state.members] == [
        (TEAM, TeamRole.LEAD, "lead"),
        ("s-a", TeamRole.MEMBER, "worker"),
        ("s-b", TeamRole.MEMBER, "worker-2"),
    ]
    assert all(m.status is SessionStatus.QUEUED and m.epoch == 0 for m in state.members)
    assert [(t.task_id, t.depends_on, t.status) for t in state.tasks] == [
        ("t1", (), TaskStatus.OPEN),
        ("t2", ("t1",), TaskStatus.OPEN),
    ]
    assert team_ledger(ledger).team_of("s-b").name == "worker-2"
    assert team_ledger(ledger).team_of("nobody") is None
    assert team_ledger(ledger).read_team("no-team") is None


def test_a_member_name_is_unique_within_its_team(ledger: Any) -> None:
    worlds(ledger)
    make_world(ledger, "s-c", "r-c")
    teams = team_ledger(ledger)
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        teams.add_member(tx, TeamMember(TEAM, "s-c", TeamRole.MEMBER, "worker", "worker", T0))
    with ledger.transaction() as tx:
        assert teams.add_member(tx, TeamMember(TEAM, "s-a", TeamRole.MEMBER, "x", "x", T0)) is False
    assert teams.team_of("s-c") is None


def test_a_claim_takes_an_open_task_once_and_refuses_a_second_claimant(ledger: Any) -> None:
    _, a, b = worlds(ledger)
    add_tasks(ledger, task("t1"))
    assert claim(a, "t1") is True
    assert claim(b, "t1") is False
    assert claim(a, "t1") is False  # not open any more: a fresh claim does not match
    assert status(ledger, "t1") == (TaskStatus.CLAIMED, "s-a")
    found = team_ledger(ledger).read_team(TEAM).task("t1")
    assert found.claim_epoch == 0 and found.claimed_at == at(5)


def test_a_task_whose_dependencies_are_not_done_cannot_be_claimed(ledger: Any) -> None:
    _, a, b = worlds(ledger)
    add_tasks(ledger, task("t1"), task("t2"), task("t3", "t1", "t2"))
    teams = team_ledger(ledger)
    assert claim(a, "t3") is False
    assert claim(a, "t1") and claim(b, "t2")
    with ledger.transaction() as tx:
        assert teams.settle_task(
            tx, TEAM, "t1", owner="s-a", status="done", result="r", receipt=None, at=at(6)
        )
    assert claim(a, "t3") is False  # t2 is claimed, not done
    with ledger.transaction() as tx:
        assert teams.settle_task(
            tx, TEAM, "t2", owner="s-b", status="failed", result="no", receipt=None, at=at(6)
        )
    assert claim(a, "t3") is False  # failed is not done
    assert status(ledger, "t3") == (TaskStatus.OPEN, None)


def test_a_claim_is_fenced_by_the_claimants_epoch(ledger: Any) -> None:
    _, a, _ = worlds(ledger)
    add_tasks(ledger, task("t1"))
    old = a.epoch
    a.bump()
    # the fenced transaction refuses a stale owner before the update runs ...
    with pytest.raises(StaleEpochError):
        claim(a, "t1", epoch=old)
    # ... and the update itself requires the epoch (without the transaction's fence)
    teams = team_ledger(ledger)
    with ledger.transaction() as tx:
        assert not teams.claim_task(tx, TEAM, "t1", "s-a", old, renew=False, at=at(7))
    assert status(ledger, "t1") == (TaskStatus.OPEN, None)
    assert claim(a, "t1") is True


def test_a_done_session_cannot_claim(ledger: Any) -> None:
    _, a, _ = worlds(ledger)
    add_tasks(ledger, task("t1"))
    with ledger.transaction(fence=a.fence) as tx:
        ledger.set_session_status(tx, "s-a", SessionStatus.DONE, at=at(3))
    teams = team_ledger(ledger)
    with ledger.transaction() as tx:
        assert not teams.claim_task(tx, TEAM, "t1", "s-a", a.epoch, renew=False, at=at(7))


def test_a_renewal_refences_only_the_holders_own_claim(ledger: Any) -> None:
    _, a, b = worlds(ledger)
    add_tasks(ledger, task("t1"))
    assert claim(a, "t1")
    a.bump()
    assert claim(b, "t1", renew=True) is False
    assert claim(a, "t1", renew=True) is True
    found = team_ledger(ledger).read_team(TEAM).task("t1")
    assert (found.owner, found.claim_epoch, found.claimed_at) == ("s-a", a.epoch, at(5))


def test_settling_is_conditional_on_the_claim(ledger: Any) -> None:
    _, a, _ = worlds(ledger)
    add_tasks(ledger, task("t1"), task("t2"))
    teams = team_ledger(ledger)
    assert claim(a, "t1")
    receipt = {"run_id": "r-a", "call_id": "c9", "evidence": []}
    with ledger.transaction() as tx:
        assert not teams.settle_task(
            tx, TEAM, "t1", owner="s-b", status="done", result="r", receipt=None, at=at(8)
        )
        assert teams.settle_task(
            tx, TEAM, "t1", owner="s-a", status="done", result="r", receipt=receipt, at=at(8)
        )
        assert not teams.settle_task(  # already done
            tx, TEAM, "t1", owner="s-a", status="done", result="again", receipt=None, at=at(9)
        )
        assert teams.settle_task(  # a cascade failure of an open task
            tx, TEAM, "t2", owner=None, status="failed", result="dep", receipt=None, at=at(9)
        )
    state = teams.read_team(TEAM)
    assert (state.task("t1").status, state.task("t1").result) == (TaskStatus.DONE, "r")
    assert state.task("t1").receipt == receipt
    assert state.task("t2").status is TaskStatus.FAILED


def test_a_stale_claim_is_marked_then_released_only_while_still_stale(ledger: Any) -> None:
    _, a, b = worlds(ledger)
    add_tasks(ledger, task("t1"), task("t2"))
    teams = team_ledger(ledger)
    assert claim(a, "t1") and claim(b, "t2")
    with ledger.transaction() as tx:  # neither holder lost anything yet: not stale
        assert not teams.mark_stale(tx, TEAM, "t1", owner="s-a", claim_epoch=0, at=at(10))
        assert not teams.release_task(tx, TEAM, "t1", owner="s-a", claim_epoch=0, at=at(10))
    a.bump()  # a new owner of s-a: its claim at epoch 0 is stale
    with ledger.transaction(fence=b.fence) as tx:  # s-b ends: its claim is stale
        ledger.set_session_status(tx, "s-b", SessionStatus.DONE, at=at(11))
    with ledger.transaction() as tx:
        assert teams.mark_stale(tx, TEAM, "t1", owner="s-a", claim_epoch=0, at=at(12))
        assert not teams.mark_stale(tx, TEAM, "t1", owner="s-a", claim_epoch=0, at=at(13))
        assert not teams.release_task(tx, TEAM, "t2", owner="s-b", claim_epoch=7, at=at(12))
        assert teams.release_task(tx, TEAM, "t2", owner="s-b", claim_epoch=0, at=at(12))
    assert team_ledger(ledger).read_team(TEAM).task("t1").stale_since == at(12)
    assert claim(a, "t1", renew=True)  # the next owner renews it: no longer stale
    found = teams.read_team(TEAM).task("t1")
    assert found.stale_since is None and found.claim_epoch == a.epoch
    with ledger.transaction() as tx:
        assert not teams.release_task(tx, TEAM, "t1", owner="s-a", claim_epoch=0, at=at(14))
    assert status(ledger, "t1") == (TaskStatus.CLAIMED, "s-a")
    assert status(ledger, "t2") == (TaskStatus.OPEN, None)
    assert [t.task_id for t in teams.claimed_tasks()] == ["t1"]


def test_team_mail_is_idempotent_and_never_refused_for_space(ledger: Any) -> None:
    worlds(ledger)
    teams = team_ledger(ledger)
    with ledger.transaction() as tx:
        for i in range(150):  # beyond the inbox's default limits (20 user, 100 background)
            message = InboxMessage(
                message_id=f"team-mail:r-lead:c{i}",
                session_id="s-a",
                kind=InboxKind.BACKGROUND,
                text="x" * 1000,
                size_bytes=1000,
                created_at=at(i),
            )
            assert teams.post_message(tx, message) is True
        assert teams.post_message(tx, message) is False
    pending = ledger.inbox("s-a", statuses=[InboxStatus.PENDING])
    assert len(pending) == 150 and all(m.next_turn for m in pending)


def test_park_waiting_on_and_the_version_counter(ledger: Any) -> None:
    _, a, _ = worlds(ledger)
    teams = team_ledger(ledger)
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        teams.park_team(tx, "s-a", at=at(3))  # not under its own fence
    with ledger.transaction(fence=a.fence) as tx:
        assert teams.park_team(tx, "s-a", at=at(3))
        teams.set_waiting(tx, TEAM, "s-a", WaitingOn.IDLE)
        assert teams.bump_version(tx, TEAM, at=at(3)) == 1
    member = teams.team_of("s-a")
    assert member.status is SessionStatus.WAITING and member.parked_on is WaitingOn.IDLE
    with ledger.transaction(fence=a.fence) as tx:
        ledger.request_cancel(tx, "s-a", at=at(4))
        assert teams.park_team(tx, "s-a", at=at(4)) is False  # a cancel is never parked on


def test_the_claim_history_and_checklists(ledger: Any) -> None:
    _, a, _ = worlds(ledger)
    teams = team_ledger(ledger)
    entries = [
        TaskLogEntry(TEAM, "t1", LogAction.CREATED, at(1), "s-lead", None, {}, TEAM),
        TaskLogEntry(TEAM, "t1", LogAction.CLAIMED, at(2), "s-a", 0, {"x": 1}, TEAM),
    ]
    with ledger.transaction() as tx:
        teams.log(tx, entries)
    assert teams.task_log(TEAM) == entries
    assert teams.todos("s-a") == ([], 0)
    items = [{"content": "read", "status": "completed"}, {"content": "edit", "status": "pending"}]
    with ledger.transaction(fence=a.fence) as tx:
        assert teams.save_todos(tx, "s-a", TEAM, items, at=at(5)) == 1
    with ledger.transaction(fence=a.fence) as tx:
        assert teams.save_todos(tx, "s-a", TEAM, items[:1], at=at(6)) == 2
    assert teams.todos("s-a") == (items[:1], 2)


def test_a_failed_transaction_leaves_no_team_row(ledger: Any) -> None:
    worlds(ledger)
    teams = team_ledger(ledger)
    with pytest.raises(RuntimeError), ledger.transaction() as tx:
        teams.insert_task(tx, task("t9"))
        teams.log(tx, [TaskLogEntry(TEAM, "t9", LogAction.CREATED, at(1), root_id=TEAM)])
        raise RuntimeError("rolled back")
    assert teams.read_team(TEAM).tasks == ()
    assert teams.task_log(TEAM) == []
