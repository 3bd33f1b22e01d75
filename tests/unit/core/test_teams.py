"""The pure team rules (``core/teams.py``, ``core/team_gate.py``, ``core/todos.py``).

DESIGN.md section 8: claims, dependencies, completion, stale claims and the
release bound, unique names, when a team session parks, is told about work,
or ends, and who a change wakes.  Table-driven: one row per rule.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.team_gate import (
    TeamNudge,
    TeamView,
    TeamWait,
    Wake,
    team_gate,
    wakes_after,
    wakes_for_park,
    with_tasks,
)
from nahida_workers.core.teams import (
    Completion,
    NewTask,
    Refused,
    TaskStatus,
    TeamMember,
    TeamRole,
    TeamState,
    TeamTask,
    WaitingOn,
    claim_order,
    decide_complete,
    decide_new_task,
    release_due,
    stale,
    unique_name,
)
from nahida_workers.core.todos import TodoItem, TodoStatus, parse_todos, render_todos

T0 = datetime(2027, 1, 1, tzinfo=UTC)
S = TaskStatus


def t(
    task_id: str, status: TaskStatus = S.OPEN, *deps: str, owner: str | None = None, **kw: object
) -> TeamTask:
    return TeamTask(
        "L",
        task_id,
        f"title {task_id}",
        T0,
        T0,
        depends_on=deps,
        status=status,
        owner=owner,
        claim_epoch=kw.pop("epoch", 1 if owner else None),
        created_by=f"r:{task_id}",
        **kw,  # type: ignore[arg-type]
    )


def m(
    member_id: str,
    status: SessionStatus = SessionStatus.RUNNING,
    *,
    role: TeamRole = TeamRole.MEMBER,
    waiting_on: WaitingOn | None = None,
    epoch: int = 1,
) -> TeamMember:
    return TeamMember(
        "L", member_id, role, member_id, member_id, T0, None, waiting_on, status, epoch
    )


def team(
    *tasks: TeamTask, members: tuple[TeamMember, ...] | None = None, version: int = 1
) -> TeamState:
    if members is None:
        members = (
            m("L", role=TeamRole.LEAD, waiting_on=WaitingOn.TASKS, status=SessionStatus.WAITING),
            m("a"),
            m("b"),
        )
    return TeamState("L", "L", "L", version, members, tasks)


# -- claims ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tasks", "who", "asked", "expected"),
    [
        ((t("t1"), t("t2")), "a", None, ["t1", "t2"]),  # every claimable task, oldest first
        ((t("t1", S.CLAIMED, owner="b"), t("t2")), "a", None, ["t2"]),  # not a claimed one
        ((t("t1"), t("t2", S.OPEN, "t1")), "a", None, ["t1"]),  # not one with unfinished deps
        ((t("t1", S.DONE), t("t2", S.OPEN, "t1")), "a", None, ["t2"]),  # deps done: claimable
        ((t("t1", S.FAILED), t("t2", S.OPEN, "t1")), "a", None, "nothing_claimable"),
        ((t("t1"), t("t2", S.CLAIMED, owner="a")), "a", None, ["t2", "t1"]),  # own claim first
        ((t("t1", S.CLAIMED, owner="b"),), "a", "t1", "claimed"),
        ((t("t1", S.CLAIMED, owner="a"),), "a", "t1", ["t1"]),  # renewal of its own claim
        ((t("t1", S.DONE),), "a", "t1", "settled"),
        ((t("t1"), t("t2", S.OPEN, "t1")), "a", "t2", "dependencies"),
        ((t("t1"),), "a", "t9", "unknown_task"),
        ((t("t1", S.DONE),), "a", None, "nothing_claimable"),
    ],
)
def test_claim_order(
    tasks: tuple[TeamTask, ...], who: str, asked: str | None, expected: object
) -> None:
    got = claim_order(team(*tasks), who, asked)
    if isinstance(expected, str):
        assert isinstance(got, Refused) and got.code == expected
    else:
        assert got == expected


def test_nothing_claimable_says_why() -> None:
    got = claim_order(team(t("t1", S.CLAIMED, owner="b"), t("t2", S.OPEN, "t1")), "a", None)
    assert isinstance(got, Refused)
    assert "['t1']" in got.text and "['t2']" in got.text


# -- new tasks --------------------------------------------------------------------------------
def new(
    state: TeamState, task_id: str, *deps: str, by: str = "r:new", title: str = "x"
) -> NewTask | Refused:
    return decide_new_task(
        state, task_id=task_id, title=title, description="d", depends_on=deps, created_by=by, at=T0
    )


def test_a_new_task_gets_the_next_sequence_and_the_teams_root() -> None:
    got = new(team(t("t1", seq=1)), "t2", "t1")
    assert isinstance(got, NewTask) and not got.existing
    assert (got.task.seq, got.task.depends_on, got.task.root_id, got.task.status) == (
        2,
        ("t1",),
        "L",
        S.OPEN,
    )


@pytest.mark.parametrize(
    ("task_id", "deps", "by", "code"),
    [
        ("t1", (), "r:other", "task_exists"),
        ("bad id!", (), "r:new", "bad_id"),
        ("t2", ("t9",), "r:new", "bad_dependency"),  # dependencies must exist first: acyclic
        ("t2", ("t2",), "r:new", "bad_dependency"),
    ],
)
def test_a_new_task_is_refused(task_id: str, deps: tuple[str, ...], by: str, code: str) -> None:
    got = new(team(t("t1")), task_id, *deps, by=by)
    assert isinstance(got, Refused) and got.code == code


def test_creating_again_from_the_same_call_is_the_same_task() -> None:
    got = new(team(t("t1")), "t1", by="r:t1")
    assert isinstance(got, NewTask) and got.existing and got.task.task_id == "t1"


def test_a_task_on_a_failed_dependency_is_born_failed() -> None:
    got = new(team(t("t1", S.FAILED)), "t2", "t1")
    assert isinstance(got, NewTask) and got.task.status is S.FAILED
    assert got.task.result == "dependency t1 failed"


def test_an_empty_title_is_refused() -> None:
    got = new(team(), "t1", title="  ")
    assert isinstance(got, Refused) and got.code == "bad_title"


# -- completion ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("task", "who", "result", "code"),
    [
        (t("t1", S.CLAIMED, owner="a"), "a", "  ", "no_result"),  # completing needs a result
        (t("t1", S.CLAIMED, owner="b"), "a", "r", "not_owner"),
        (t("t1"), "a", "r", "not_owner"),  # open: claim it first
        (t("t1", S.DONE, owner="a"), "a", "r", "settled"),
    ],
)
def test_a_completion_is_refused(task: TeamTask, who: str, result: str, code: str) -> None:
    got = decide_complete(team(task), who, "t1", failed=False, result=result)
    assert isinstance(got, Refused) and got.code == code


def test_a_failure_fails_every_open_task_that_depends_on_it_transitively() -> None:
    state = team(
        t("t1", S.CLAIMED, owner="a"),
        t("t2", S.OPEN, "t1"),
        t("t3", S.OPEN, "t2"),
        t("t4", S.OPEN),
        t("t5", S.CLAIMED, "t4", owner="b"),
    )
    got = decide_complete(state, "a", "t1", failed=True, result="cannot")
    assert got == Completion("t1", S.FAILED, ("t2", "t3"))
    assert decide_complete(state, "a", "t1", failed=False, result="ok") == Completion("t1", S.DONE)


# -- stale claims and the release bound -----------------------------------------------------------
@pytest.mark.parametrize(
    ("holder", "claim_epoch", "is_stale"),
    [
        (m("a", epoch=3), 3, False),  # its owner still holds the session at the claim's epoch
        (m("a", epoch=4), 3, True),  # a new owner took the session: the claim lost ownership
        (m("a", SessionStatus.DONE, epoch=3), 3, True),  # the session ended
        (m("a", SessionStatus.WAITING, epoch=3), 3, False),  # parked is not gone
        (None, 3, True),  # no such member
    ],
)
def test_stale(holder: TeamMember | None, claim_epoch: int, is_stale: bool) -> None:
    claimed = t("t1", S.CLAIMED, owner="a", epoch=claim_epoch)
    assert stale(claimed, holder) is is_stale
    assert stale(replace(claimed, status=S.DONE), holder) is False


def test_release_is_due_a_bound_after_the_claim_was_first_seen_stale() -> None:
    seen = t("t1", S.CLAIMED, owner="a", stale_since=T0)
    assert not release_due(t("t1", S.CLAIMED, owner="a"), now=T0 + timedelta(days=1), bound_s=60)
    assert not release_due(seen, now=T0 + timedelta(seconds=59), bound_s=60)
    assert release_due(seen, now=T0 + timedelta(seconds=60), bound_s=60)


@pytest.mark.parametrize(
    ("taken", "display", "name"),
    [
        ([], "worker", "worker"),
        (["worker"], "worker", "worker-2"),
        (["worker", "worker-2"], "worker", "worker-3"),
        (["lead"], "  two   words ", "two words"),
        (["lead"], "   ", "member"),
    ],
)
def test_unique_name(taken: list[str], display: str, name: str) -> None:
    assert unique_name(taken, display) == name


# -- the gate -------------------------------------------------------------------------------------
LEAD_WAITING = m("L", SessionStatus.WAITING, role=TeamRole.LEAD, waiting_on=WaitingOn.TASKS)
LEAD_FOR_MEMBERS = m("L", SessionStatus.WAITING, role=TeamRole.LEAD, waiting_on=WaitingOn.MEMBERS)
LEAD_RUNNING = m("L", role=TeamRole.LEAD)


@pytest.mark.parametrize(
    ("who", "tasks", "members", "expected"),
    [
        # a member holding a claim is told to finish it, whatever else holds
        ("a", (t("t1", S.CLAIMED, owner="a"),), (LEAD_WAITING, m("a")), "held"),
        # a member with claimable work is told so
        ("a", (t("t1"),), (LEAD_WAITING, m("a")), "claimable"),
        # nothing claimable, graph unsettled: idle member parks
        ("a", (t("t1", S.CLAIMED, owner="b"),), (LEAD_WAITING, m("a"), m("b")), WaitingOn.IDLE),
        # graph settled, but the lead still runs (it may add tasks): park
        ("a", (t("t1", S.DONE),), (LEAD_RUNNING, m("a")), WaitingOn.IDLE),
        ("a", (t("t1", S.DONE),), (LEAD_WAITING, m("a")), WaitingOn.IDLE),
        # graph settled and the lead waits for its members (or ended): the member ends
        ("a", (t("t1", S.DONE),), (LEAD_FOR_MEMBERS, m("a")), None),
        ("a", (t("t1", S.DONE),), (m("L", SessionStatus.DONE, role=TeamRole.LEAD), m("a")), None),
        # a lead parks until every task is settled ...
        ("L", (t("t1"),), (LEAD_RUNNING, m("a")), WaitingOn.TASKS),
        # ... then until every member ended ...
        ("L", (t("t1", S.DONE),), (LEAD_RUNNING, m("a", SessionStatus.WAITING)), WaitingOn.MEMBERS),
        # ... then it ends
        ("L", (t("t1", S.DONE),), (LEAD_RUNNING, m("a", SessionStatus.DONE)), None),
        ("L", (), (LEAD_RUNNING,), None),
        # a lead with unsettled tasks and no member left is told to do them
        ("L", (t("t1"),), (LEAD_RUNNING, m("a", SessionStatus.DONE)), "no_members"),
        ("L", (t("t1", S.CLAIMED, owner="L"),), (LEAD_RUNNING, m("a")), "held"),
    ],
)
def test_team_gate(
    who: str, tasks: tuple[TeamTask, ...], members: tuple[TeamMember, ...], expected: object
) -> None:
    got = team_gate(TeamView(who, team(*tasks, members=members)))
    if expected is None:
        assert got is None
    elif isinstance(expected, WaitingOn):
        assert got == TeamWait("L", expected)
    else:
        assert isinstance(got, TeamNudge) and got.kind == expected


def test_a_member_woken_by_anything_else_is_not_parked_on_the_team() -> None:
    woken = m("L", SessionStatus.QUEUED, role=TeamRole.LEAD, waiting_on=WaitingOn.MEMBERS)
    assert woken.parked_on is None
    got = team_gate(TeamView("a", team(t("t1", S.DONE), members=(woken, m("a")))))
    assert got == TeamWait("L", WaitingOn.IDLE)  # the lead may still add work


# -- wake-ups -------------------------------------------------------------------------------------
IDLE_A = m("a", SessionStatus.WAITING, waiting_on=WaitingOn.IDLE)
IDLE_B = m("b", SessionStatus.WAITING, waiting_on=WaitingOn.IDLE)


def test_work_that_becomes_claimable_wakes_idle_members_but_not_the_actor_or_busy_ones() -> None:
    before = team(
        t("t1", S.CLAIMED, owner="c"),
        t("t2", S.OPEN, "t1"),
        members=(LEAD_WAITING, IDLE_A, IDLE_B, m("c")),
    )
    after = with_tasks(before, [replace(before.tasks[0], status=S.DONE)], version=2)
    wakes = wakes_after(before, after, actor="c")
    assert [w.member_id for w in wakes] == ["a", "b"]
    assert all(
        w.text and "t2" in w.text and w.message_id == f"team:L:v2:work:{w.member_id}" for w in wakes
    )
    assert wakes_after(before, after, actor="a") == [w for w in wakes if w.member_id == "b"]
    # no new claimable task: nobody wakes
    same = with_tasks(before, [replace(before.tasks[0], result="x")], version=2)
    assert wakes_after(before, same, actor="c") == []


def test_the_lead_is_woken_once_when_the_graph_becomes_settled() -> None:
    before = team(t("t1", S.CLAIMED, owner="a"), t("t2", S.DONE), members=(LEAD_WAITING, m("a")))
    after = with_tasks(before, [replace(before.tasks[0], status=S.DONE, result="ok")], version=5)
    (wake,) = wakes_after(before, after, actor="a")
    assert wake.member_id == "L" and wake.message_id == "team:L:v5:settled"
    assert wake.text is not None and wake.text.startswith("All 2 tasks of team L are settled")
    assert "- t1 done by a: ok" in wake.text
    assert wakes_after(after, after, actor="a") == []  # already settled before: no second wake


def test_the_leads_wait_for_members_redispatches_only_idle_members() -> None:
    state = team(
        t("t1", S.DONE), members=(LEAD_RUNNING, IDLE_A, m("b"), m("c", SessionStatus.DONE))
    )
    assert wakes_for_park(state, WaitingOn.MEMBERS) == [Wake("a")]
    assert wakes_for_park(state, WaitingOn.TASKS) == []


# -- the checklist ---------------------------------------------------------------------------------
def test_todos_parse_and_render() -> None:
    items = parse_todos(
        [
            {"content": "read", "status": "completed"},
            {"content": "edit", "status": "in_progress"},
            {"content": "test"},
        ]
    )
    assert items == [
        TodoItem("read", TodoStatus.COMPLETED),
        TodoItem("edit", TodoStatus.IN_PROGRESS),
        TodoItem("test"),
    ]
    assert render_todos(items) == "Checklist (1/3 completed):\n[x] read\n[>] edit\n[ ] test"
    assert render_todos([]) == "The checklist is empty."


@pytest.mark.parametrize(
    ("items", "why"),
    [
        (
            [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}],
            "at most one",
        ),
        ([{"content": " ", "status": "pending"}], "non-empty"),
        ([{"content": "a", "status": "later"}], "status must be"),
        ([{"content": "a"}] * 101, "at most 100"),
    ],
)
def test_todos_refused(items: list[dict[str, str]], why: str) -> None:
    got = parse_todos(items)
    assert isinstance(got, str) and why in got
