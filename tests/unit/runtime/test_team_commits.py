"""The team commit points (``runtime/commits/team.py``) on every ledger backend.

DESIGN.md section 8: a park and every change that could end it take the
team row first, so no wake-up is lost between them; a park is refused when
committed facts say there is work, mail or a cancel; a message reaches a
member by its id and wakes it when it is parked.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import InboxStatus, OutboxRecord
from nahida_workers.core.state import RunState
from nahida_workers.core.team_gate import TeamWait
from nahida_workers.core.teams import NewTask, Refused, TeamMember, TeamRole, WaitingOn
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.ports import Fence
from nahida_workers.runtime.commits.team import TeamCommits
from nahida_workers.testing.doubles import FakeClock
from tests.contract.ledger_world import T0, make_world

LEAD = "lead-1"


class _Alive:
    lost = False

    def check(self) -> None:
        """The lease is held."""


class Team:
    """A lead and two members, each with an owner at epoch 0, and their commit points."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.teams = team_ledger(ledger)
        self.clock = FakeClock(T0)
        self.published: list[OutboxRecord] = []
        for sid in (LEAD, "m-a", "m-b"):
            make_world(ledger, sid, f"run-{sid}")
        with ledger.transaction() as tx:
            self.teams.lock_team(tx, LEAD, lead_id=LEAD, root_id=LEAD, at=T0)
            for sid, name in (("m-a", "a"), ("m-b", "b")):
                self.teams.add_member(tx, TeamMember(LEAD, sid, TeamRole.MEMBER, name, name, T0))

    def commits(self, sid: str) -> TeamCommits:
        session = self.ledger.get_session(sid)
        return TeamCommits(
            self.ledger,
            self.teams,
            self.clock,
            Fence(sid, session.lease_epoch),
            _Alive(),  # type: ignore[arg-type]
            root_id=LEAD,
            publish=self.published.extend,
        )

    def park(self, sid: str, waiting_on: WaitingOn) -> bool:
        run = f"run-{sid}"
        state = RunState.from_ledger(run, self.ledger.events(run))
        return self.commits(sid).park(state, run, TeamWait(LEAD, waiting_on))

    def create(self, task_id: str, *deps: str) -> NewTask | Refused:
        return self.commits(LEAD).create_task(
            LEAD,
            task_id=task_id,
            title=task_id,
            description="",
            depends_on=deps,
            created_by=f"run-{LEAD}:{task_id}",
        )

    def member(self, sid: str) -> TeamMember:
        found = self.teams.team_of(sid)
        assert found is not None
        return found


def test_a_change_after_a_park_wakes_the_parked_member(ledger: Any) -> None:
    team = Team(ledger)
    assert team.park("m-a", WaitingOn.IDLE)
    assert team.member("m-a").parked_on is WaitingOn.IDLE
    assert team.create("t1") == NewTask(team.teams.read_team(LEAD).task("t1"))
    (record,) = team.published  # re-dispatched: no slot was held meanwhile
    assert record.session_id == "m-a"
    assert record.outbox_id in {r.outbox_id for r in ledger.pending_outbox()}
    (message,) = ledger.inbox("m-a", statuses=[InboxStatus.PENDING])
    assert "t1 (t1) can be claimed now" in message.text and message.next_turn
    assert team.member("m-a").waiting_on is None
    assert ledger.inbox("m-b", statuses=[InboxStatus.PENDING]) == []  # m-b was not parked


def test_a_park_is_refused_when_work_mail_or_a_cancel_is_committed(ledger: Any) -> None:
    team = Team(ledger)
    team.create("t1")
    assert team.park("m-a", WaitingOn.IDLE) is False  # a claimable task: the gate says work
    assert ledger.get_session("m-a").status is SessionStatus.QUEUED
    team.commits("m-a").claim(LEAD, "t1")
    sent = team.commits(LEAD).send(LEAD, "m-b", "hello", "mail-1")
    assert sent == "m-b"
    assert team.park("m-b", WaitingOn.IDLE) is False  # its mail is pending
    assert team.park("m-a", WaitingOn.IDLE) is False  # it holds t1
    with ledger.transaction() as tx:
        ledger.request_cancel(tx, LEAD, at=T0)
    assert team.park(LEAD, WaitingOn.TASKS) is False  # a cancel is never parked on
    assert ledger.get_session(LEAD).status is SessionStatus.QUEUED


def test_a_message_is_addressed_by_member_id_and_wakes_a_parked_member(ledger: Any) -> None:
    team = Team(ledger)
    assert team.park("m-a", WaitingOn.IDLE)
    lead = team.commits(LEAD)
    assert lead.send(LEAD, "m-a", "wake up", "mail-1") == "m-a"
    assert [r.session_id for r in team.published] == ["m-a"]
    assert lead.send(LEAD, "m-a", "wake up", "mail-1") == "m-a"  # same id: one message
    assert len(ledger.inbox("m-a")) == 1
    for to, code in (("a", "unknown"), ("nobody", "unknown"), (LEAD, "self")):
        refused = lead.send(LEAD, to, "x", f"mail-{to}")
        assert isinstance(refused, Refused) and refused.code == code
    assert team.commits("m-b").send(LEAD, "lead", "to the lead", "mail-2") == LEAD
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "m-b", SessionStatus.DONE, at=T0)
    ended = lead.send(LEAD, "m-b", "too late", "mail-3")
    assert isinstance(ended, Refused) and ended.code == "ended"


def test_the_leads_wait_for_members_redispatches_the_idle_ones(ledger: Any) -> None:
    team = Team(ledger)
    assert team.park("m-a", WaitingOn.IDLE)
    assert team.park(LEAD, WaitingOn.MEMBERS)
    assert [r.session_id for r in team.published] == ["m-a"]
    assert ledger.inbox("m-a") == []  # no input: it re-judges its answer and ends
    assert team.member(LEAD).parked_on is WaitingOn.MEMBERS


def test_completing_the_last_task_wakes_the_parked_lead_with_the_summary(ledger: Any) -> None:
    team = Team(ledger)
    team.create("t1")
    team.create("t2", "t1")
    assert team.park(LEAD, WaitingOn.TASKS)
    a = team.commits("m-a")
    assert not isinstance(a.claim(LEAD, None), Refused)
    a.complete(LEAD, "t1", failed=True, result="cannot", receipt={})
    state = team.teams.read_team(LEAD)
    assert [t.status.value for t in state.tasks] == ["failed", "failed"]  # t2 failed with it
    (record,) = team.published
    assert record.session_id == LEAD
    (summary,) = ledger.inbox(LEAD, statuses=[InboxStatus.PENDING])
    assert summary.text.startswith("All 2 tasks of team lead-1 are settled: 0 done, 2 failed.")
    assert "- t2 failed by nobody: dependency t1 failed" in summary.text
