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
from nahida_workers.core.teams import TaskStatus, TeamRole, WaitingOn
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.commits.team_release import release_stale_claims
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.runtime.fanout.executor import InlineExecutor
from nahida_workers.runtime.teams.projection import team_document
from nahida_workers.runtime.wiring import build_registry
from nahida_workers.settings import Settings
from nahida_workers.testing.doubles import FakeClock, memory_runner, scripted_spec
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
    """A member that ends holding a claim: the sweep marks it, releases it after the bound,
    and the idle member it wakes does the task."""
    quitter = worker_profile(
        [
            {"tool_calls": [{"id": "claim", "name": "TeamTaskClaim", "arguments": {}}]},
            {"error": {"status": 400, "message": "the model gives up"}},
        ]
    )
    turns = [
        {"text": "Plan.", "tool_calls": [create("t1")]},
        {"text": "Team.", "tool_calls": [member("q", "quitter", "quitter"), member("k", "keen")]},
        {"text": "Working."},
        {"text": "Done."},
    ]
    lead = submit(w, turns, tmp_path, quitter=quitter, worker=worker_profile())
    w.pump(limit=50)
    ledger = w.runner.ledger
    teams = team_ledger(ledger)
    q, k = child_id(RUN, "q"), child_id(RUN, "k")
    assert final(ledger, q)["state"] == "failed"
    (task,) = teams.read_team(lead).tasks
    assert task.status is TaskStatus.CLAIMED and task.owner == q
    assert teams.team_of(k).parked_on is WaitingOn.IDLE  # nothing claimable: parked, no slot
    assert ledger.get_session(lead).status is SessionStatus.WAITING
    # A team park arms the run's budget as a durable timer, as a child park does.
    from nahida_workers.ledger.control import control_ledger

    (timer,) = control_ledger(ledger).timers(lead)
    assert (timer.kind, timer.payload["run_id"], timer.fired_at) == ("budget", RUN, None)
    clock = w.runner.clock
    sweeper = Sweeper(
        ledger,
        w.runner.leases,
        w.dispatcher,
        clock,
        release_claims=lambda: release_stale_claims(
            ledger,
            teams,
            clock,
            bound_s=30,
            publish=lambda rs: [w.dispatcher.publish(r) for r in rs],
        ),
    )
    assert sweeper.sweep().claims_released == ()  # first seen stale: marked, not released
    assert teams.read_team(lead).tasks[0].stale_since is not None
    clock.advance(29)
    assert sweeper.sweep().claims_released == ()
    clock.advance(2)
    assert sweeper.sweep().claims_released == ((lead, "t1"),)
    assert sweeper.sweep().claims_released == ()  # nothing more to release
    assert [sid for sid, _ in w.queue.published] == [k]  # the idle member is woken
    w.pump(limit=50)
    (task,) = teams.read_team(lead).tasks
    assert (task.status, task.owner) == (TaskStatus.DONE, k)
    assert [(a[1], a[2]) for a in actions(ledger, lead) if a[0] == "t1"] == [
        ("created", lead),
        ("claimed", q),
        ("released", q),
        ("claimed", k),
        ("done", k),
    ]
    assert final(ledger, lead)["state"] == "completed"


class _Crash(BaseException):
    """A worker killed between two commits (not an error any layer may catch)."""


def test_an_owner_killed_after_its_claim_committed_renews_it_and_completes_once(
    tmp_path: Path,
) -> None:
    """SIGKILL between the claim's commit and its result's: the claim is re-run, not doubled.

    The next owner's recovery re-runs the idempotent TeamTaskClaim call
    (DESIGN.md section 3): it renews the claim the session already holds
    (``refenced`` at the new epoch) instead of claiming another task.
    """
    w = World()
    lead = submit(w, lead_turns(member("m1", "worker")), tmp_path)
    ledger = w.runner.ledger
    teams = team_ledger(ledger)
    m1 = child_id(RUN, "m1")
    seen = {"claim": False, "killed": False}

    def kill_after_the_claim() -> None:
        """Let the claim's own commit through; die on the next one (the claim's result)."""
        claimed = any(e.action.value == "claimed" for e in teams.task_log(lead))
        if claimed and seen["claim"] and not seen["killed"]:
            seen["killed"] = True
            raise _Crash
        seen["claim"] = claimed

    ledger.commit_hook = kill_after_the_claim
    with pytest.raises(_Crash):
        w.pump(limit=200)
    ledger.commit_hook = None
    (claim_call,) = [
        e for e in ledger.events(ledger.runs_of(m1)[-1].run_id) if e.type is EventType.TOOL_CALL
    ]
    assert not [e for e in ledger.events(claim_call.run_id) if e.type is EventType.TOOL_RESULT]
    w.queue.published.append((m1, "redelivery"))  # the broker redelivers the killed delivery
    w.pump(limit=200)
    log = actions(ledger, lead)
    assert [a[1] for a in log if a[0] == "t1"] == ["created", "claimed", "refenced", "done"]
    assert all(
        len([a for a in log if a[0] == k and a[1] == "claimed"]) == 1
        for k in ["t1", "t2", "t3", "t4"]
    )
    assert [t.status for t in teams.read_team(lead).tasks] == [TaskStatus.DONE] * 4
    history = teams.task_log(lead)
    first = next(e for e in history if e.action.value == "claimed")
    renewed = next(e for e in history if e.action.value == "refenced")
    assert renewed.member_id == first.member_id == m1
    assert renewed.epoch is not None and first.epoch is not None and renewed.epoch > first.epoch
    assert final(ledger, lead)["state"] == "completed"
    assert final(ledger, m1)["state"] == "completed"


def test_a_message_reaches_its_member_as_input_by_member_id(w: World, tmp_path: Path) -> None:
    """SendMessage addresses a member by the id its Task result gave; it arrives as input."""
    hello = worker_profile(
        [
            {"tool_calls": [{"id": "claim", "name": "TeamTaskClaim", "arguments": {}}]},
            {
                "tool_calls": [
                    {
                        "id": "done",
                        "name": "TeamTaskComplete",
                        "arguments": {"task_id": "${result:claim:line:0}", "result": "said hi"},
                    }
                ]
            },
            {"text": "Idle."},
        ]
    )
    turns = [
        {"text": "Team.", "tool_calls": [member("m1", "greeter", "hello")]},
        {
            "text": "Tell it.",
            "tool_calls": [
                {
                    "id": "send",
                    "name": "SendMessage",
                    "arguments": {"to": "${result:m1:line:1}", "text": "please say hi"},
                },
                {"id": "bad", "name": "SendMessage", "arguments": {"to": "greeter", "text": "x"}},
            ],
        },
        {"text": "Plan.", "tool_calls": [create("t1")]},
        {"text": "Waiting for the team."},
        {"text": "It said hi."},
    ]
    lead = submit(w, turns, tmp_path, hello=hello)
    w.pump(limit=100)
    ledger = w.runner.ledger
    m1 = child_id(RUN, "m1")
    results = {e.call_id: e.payload for e in ledger.events(RUN) if e.type is EventType.TOOL_RESULT}
    assert results["send"]["status"] == "ok" and m1 in results["send"]["content"]
    # a display name is a label, never an address
    assert (
        results["bad"]["status"] == "error" and "no member 'greeter'" in results["bad"]["content"]
    )
    got = [
        e.payload
        for e in ledger.events(ledger.runs_of(m1)[0].run_id)
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "inbox"
    ]
    assert got[0]["message_id"] == f"team-mail:{RUN}:send"
    assert got[0]["text"] == f"Message from lead ({lead}): please say hi"
    assert final(ledger, lead)["state"] == "completed"
    assert final(ledger, m1)["state"] == "completed"


def test_todo_write_keeps_one_sessions_checklist_in_the_ledger(w: World, tmp_path: Path) -> None:
    items = [
        {"content": "read", "status": "completed"},
        {"content": "edit", "status": "in_progress"},
    ]
    turns = [
        {"tool_calls": [{"id": "todo", "name": "TodoWrite", "arguments": {"todos": items}}]},
        {
            "tool_calls": [
                {
                    "id": "bad",
                    "name": "TodoWrite",
                    "arguments": {
                        "todos": [{**items[1]}, {"content": "x", "status": "in_progress"}]
                    },
                }
            ]
        },
        {"text": "Noted."},
    ]
    spec = scripted_spec(turns, tools=["TodoWrite"])
    session, _ = w.dispatcher.submit(spec, workspace=str(tmp_path))
    w.pump()
    ledger = w.runner.ledger
    run = ledger.runs_of(session.session_id)[0].run_id
    results = {e.call_id: e.payload for e in ledger.events(run) if e.type is EventType.TOOL_RESULT}
    assert results["todo"]["content"] == "Checklist (1/2 completed):\n[x] read\n[>] edit"
    assert results["bad"]["status"] == "error"
    assert team_ledger(ledger).todos(session.session_id) == (items, 1)
    # a checklist makes no team: the session is in none, and it ends as usual
    assert team_ledger(ledger).team_of(session.session_id) is None
    assert final(ledger, session.session_id)["state"] == "completed"


class _ToolWorkerExecutor(InlineExecutor):
    """Runs each call the way a tool worker would: from a registry built by the job's names."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock.now)
        self.built: list[tuple[str, ...]] = []

    def run_batch(self, batch: Any, job: Any, registry: Any, *, started: Any = None) -> Any:
        build_registry(job.tools, Settings())  # what celery/tools.py does per job
        self.built.append(job.tools)
        return super().run_batch(batch, job, registry, started=started)


def test_a_tool_worker_never_sees_the_tools_the_runtime_binds(tmp_path: Path) -> None:
    """A session listing team tools sends a tool worker only the names it can build."""
    clock = FakeClock()
    executor = _ToolWorkerExecutor(clock)
    w = World(memory_runner(clock=clock, executor=executor))
    turns = [
        {"tool_calls": [{"id": "ls", "name": "LS", "arguments": {}}]},
        {"tool_calls": [{"id": "list", "name": "TeamTaskList", "arguments": {}}]},
        {"text": "Listed."},
    ]
    spec = scripted_spec(turns, tools=["LS", "Task", *MEMBER_TOOLS, "TodoWrite"], agents={})
    session, _ = w.dispatcher.submit(spec, workspace=str(tmp_path))
    w.pump()
    ledger = w.runner.ledger
    assert final(ledger, session.session_id)["state"] == "completed"
    assert executor.built and all(names == ("LS", "Write") for names in executor.built)
