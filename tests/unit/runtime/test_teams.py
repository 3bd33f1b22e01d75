"""Teams on in-memory ports and every ledger: a lead, members, a task graph, the mailbox.

DESIGN.md section 8.  One fleet with one session slot (deliveries in publish
order, ``tests/unit/runtime/test_children.py``): the lead must park while
its members work, idle members must park (no slot held) until work or mail
arrives, and every task is claimed and completed once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.core.teams import TaskStatus, TeamRole
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.commits.team import release_stale_claims
from nahida_workers.runtime.teams.projection import team_document
from nahida_workers.testing.doubles import memory_runner, scripted_spec
from tests.unit.runtime.test_children import World

RUN = "leadrun1"
MEMBER_TOOLS = ["TeamTaskList", "TeamTaskClaim", "TeamTaskComplete", "SendMessage", "Write"]


def create(task_id: str, *deps: str) -> dict[str, Any]:
    args: dict[str, Any] = {
        "task_id": task_id,
        "title": f"write {task_id}",
        "description": f"contents of {task_id}",
    }
    if deps:
        args["depends_on"] = list(deps)
    return {"id": f"c_{task_id}", "name": "TeamTaskCreate", "arguments": args}


def member(call_id: str, name: str, agent: str = "worker") -> dict[str, Any]:
    args = {"description": f"member {name}", "prompt": "Work the team's tasks.", "agent": agent}
    return {"id": call_id, "name": "Task", "arguments": {**args, "name": name}}


#: A scripted member: claim the next task, write a file named after it, complete it
#: with that Write's receipt as evidence, say it is idle -- and again (repeat_from 0).
CYCLE = [
    {"tool_calls": [{"id": "claim", "name": "TeamTaskClaim", "arguments": {}}]},
    {
        "tool_calls": [
            {
                "id": "work",
                "name": "Write",
                "arguments": {
                    "path": "${result:claim:line:0}",
                    "content": "${result:claim:line:2}",
                },
            }
        ]
    },
    {
        "tool_calls": [
            {
                "id": "done",
                "name": "TeamTaskComplete",
                "arguments": {
                    "task_id": "${result:claim:line:0}",
                    "result": "${result:work}",
                    "evidence": ["${call:work}"],
                },
            }
        ]
    },
    {"text": "Nothing left for me."},
]


def worker_profile(turns: list[dict[str, Any]] | None = None, **limits: Any) -> dict[str, Any]:
    return {
        "tools": MEMBER_TOOLS,
        "parent_close": "cancel",
        "limits": {"max_steps": 60, **limits},
        "provider": {"kind": "scripted", "script": {"turns": turns or CYCLE, "repeat_from": 0}},
    }


LEAD_TOOLS = ["Task", "TeamTaskCreate", "TeamTaskList", "SendMessage"]


def lead_turns(*members: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "text": "The plan.",
            "tool_calls": [
                create("t1"),
                create("t2", "t1"),
                create("t3", "t1"),
                create("t4", "t2", "t3"),
            ],
        },
        {"text": "The team.", "tool_calls": list(members)},
        {"text": "The team is working on it."},
        {
            "text": "Reading the results.",
            "tool_calls": [{"id": "list", "name": "TeamTaskList", "arguments": {}}],
        },
        {"text": "All four tasks are done."},
    ]


@pytest.fixture
def w(ledger: Any) -> World:
    """A one-slot fleet over every ledger backend (memory, SQLite, PostgreSQL)."""
    return World(memory_runner(ledger=ledger))


def submit(w: World, turns: list[dict[str, Any]], workspace: Path, **agents: Any) -> str:
    spec = scripted_spec(turns, tools=LEAD_TOOLS, agents=agents or {"worker": worker_profile()})
    session, _ = w.dispatcher.submit(spec, workspace=str(workspace), run_id=RUN)
    return session.session_id


def final(ledger: Any, session_id: str) -> dict[str, Any]:
    run = ledger.runs_of(session_id)[-1]
    return dict(ledger.events(run.run_id)[-1].payload)


def actions(ledger: Any, team: str) -> list[tuple[str, str, str | None]]:
    return [(e.task_id, e.action.value, e.member_id) for e in team_ledger(ledger).task_log(team)]


def test_lead_and_two_members_settle_a_graph_each_task_claimed_and_done_once(
    w: World, tmp_path: Path
) -> None:
    lead = submit(w, lead_turns(member("m1", "worker"), member("m2", "worker")), tmp_path)
    w.pump(watch=lead, limit=200)
    ledger = w.runner.ledger
    teams = team_ledger(ledger)
    state = teams.read_team(lead)
    assert state is not None
    assert [t.status for t in state.tasks] == [TaskStatus.DONE] * 4
    ids = [child_id(RUN, "m1"), child_id(RUN, "m2")]
    # one display name twice: two member ids, two unique names
    assert [(m.member_id, m.name, m.role) for m in state.members] == [
        (lead, "lead", TeamRole.LEAD),
        (ids[0], "worker", TeamRole.MEMBER),
        (ids[1], "worker-2", TeamRole.MEMBER),
    ]
    log = actions(ledger, lead)
    for task in ("t1", "t2", "t3", "t4"):
        claims = [a for a in log if a[0] == task and a[1] == "claimed"]
        done = [a for a in log if a[0] == task and a[1] == "done"]
        assert len(claims) == 1 and len(done) == 1 and claims[0][2] == done[0][2]
        assert (tmp_path / task).read_text() == f"contents of {task}"
    # the receipt behind each result: the completing call and the Write it names
    for task in state.tasks:
        assert task.receipt is not None and task.receipt["evidence"][0]["tool_name"] == "Write"
    assert final(ledger, lead)["state"] == "completed"
    assert final(ledger, lead)["final_text"] == "All four tasks are done."
    assert all(final(ledger, m)["state"] == "completed" for m in ids)
    assert all(ledger.get_session(s).status is SessionStatus.DONE for s in [lead, *ids])
    # the lead parked (no slot) while the members worked, and was woken once all settled
    parks = [
        e.payload
        for e in ledger.events(RUN)
        if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
    ]
    assert parks[0]["waiting_on"] == "tasks"
    inputs = [e.payload["text"] for e in ledger.events(RUN) if e.type is EventType.USER_INPUT]
    assert any(t.startswith("All 4 tasks of team") for t in inputs)
    # members ended no input early: an idle member parked before its last step
    member_parks = [
        e.payload["waiting_on"]
        for sid in ids
        for r in ledger.runs_of(sid)
        for e in ledger.events(r.run_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
    ]
    assert member_parks and set(member_parks) == {"idle"}
    doc = team_document(ledger, teams, lead)
    assert doc["settled"] and doc["counts"]["done"] == 4
    assert {m["state"] for m in doc["members"]} == {"completed"}


def test_stale_claim_of_an_ended_member_is_released_after_the_bound(
    w: World, tmp_path: Path
) -> None:
    """A member that ends holding a claim: the sweep marks it, then releases it after the bound."""
    quitter = worker_profile(
        [
            {"tool_calls": [{"id": "claim", "name": "TeamTaskClaim", "arguments": {}}]},
            {"error": {"status": 400, "message": "the model gives up"}},
        ]
    )
    turns = [
        {"text": "Plan.", "tool_calls": [create("t1")]},
        {"text": "Team.", "tool_calls": [member("q", "quitter", "quitter")]},
        {"text": "Working."},
    ]
    lead = submit(w, turns, tmp_path, quitter=quitter)
    w.pump(limit=50)
    ledger = w.runner.ledger
    teams = team_ledger(ledger)
    q = child_id(RUN, "q")
    assert final(ledger, q)["state"] == "failed"
    (task,) = teams.read_team(lead).tasks
    assert task.status is TaskStatus.CLAIMED and task.owner == q
    clock = w.runner.clock

    def sweep() -> list[tuple[str, str]]:
        return release_stale_claims(ledger, teams, clock, bound_s=30, publish=lambda _r: None)

    assert sweep() == []  # first seen stale: marked, not released
    assert teams.read_team(lead).tasks[0].stale_since is not None
    clock.advance(29)
    assert sweep() == []
    clock.advance(2)
    assert sweep() == [(lead, "t1")]
    (task,) = teams.read_team(lead).tasks
    assert task.status is TaskStatus.OPEN and task.owner is None
    assert [a[1] for a in actions(ledger, lead) if a[0] == "t1"] == [
        "created",
        "claimed",
        "released",
    ]
    assert sweep() == []  # nothing more to release
