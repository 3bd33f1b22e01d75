"""Child sessions on in-memory ports: spawn -> park -> children done -> adopt (issue 13 A).

DESIGN.md section 8; case B15 (parents must never hold a worker slot while
their children run).  Sessions run one delivery at a time on this thread,
like a fleet with one session-worker slot.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import EventType, SessionStatus, ToolStatus
from nahida_workers.core.lineage import ChildLimits
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing.doubles import ListTaskQueue, memory_runner, scripted_spec


def task(call_id: str, agent: str, **extra: Any) -> dict[str, Any]:
    args = {"description": f"do {call_id}", "prompt": f"please {call_id}", "agent": agent}
    return {"id": call_id, "name": "Task", "arguments": {**args, **extra}}


def profile(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [], "provider": {"kind": "scripted", "script": {"turns": list(turns)}}}


AGENTS = {
    "alpha": profile({"text": "Alpha result."}),
    "beta": profile({"text": "Beta result."}),
    "broken": profile({"error": {"status": 400, "message": "bad request"}}),
}


def parent_spec(calls: list[dict[str, Any]], **kw: Any) -> Any:
    turns = [{"text": "Fanning out.", "tool_calls": calls}, {"text": "All summarised."}]
    return scripted_spec(turns, tools=["Task"], agents=AGENTS, **kw)


class World:
    """One memory fleet with one slot: deliveries run in publish order."""

    def __init__(self, runner: SessionRunner | None = None) -> None:
        self.runner = runner or memory_runner()
        self.queue = ListTaskQueue()
        self.dispatcher = Dispatcher(self.runner.ledger, self.queue, self.runner.clock)
        self.runner.publish = self.dispatcher.publish
        self.outcomes: list[tuple[str, SessionOutcome]] = []
        self.parent_states: list[SessionStatus] = []

    def submit(self, spec: Any) -> str:
        session, _ = self.dispatcher.submit(spec, workspace="/tmp")
        return session.session_id

    def pump(self, watch: str | None = None, limit: int = 100) -> None:
        done = 0
        while self.queue.published and done < limit:
            sid, _ = self.queue.published.pop(0)
            self.outcomes.append((sid, self.runner.run(sid)))
            if watch is not None:
                self.parent_states.append(self.runner.ledger.get_session(watch).status)
            done += 1


def results(ledger: Any, session_id: str) -> list[Any]:
    run = ledger.runs_of(session_id)[-1]
    return [e for e in ledger.events(run.run_id) if e.type is EventType.TOOL_RESULT]


def test_parent_parks_then_adopts_children_in_call_order() -> None:
    w = World()
    parent = w.submit(parent_spec([task("call_a", "alpha"), task("call_b", "beta")]))
    w.pump(watch=parent)
    ledger = w.runner.ledger
    assert w.outcomes[0] == (parent, SessionOutcome.PARKED)
    assert w.parent_states[0] is SessionStatus.WAITING  # waiting while its children ran
    assert ledger.get_session(parent).status is SessionStatus.DONE
    run = ledger.runs_of(parent)[-1]
    assert ledger.events(run.run_id)[-1].payload["state"] == "completed"
    adopted = results(ledger, parent)
    assert [e.call_id for e in adopted] == ["call_a", "call_b"]
    assert [e.payload["content"] for e in adopted] == ["Alpha result.", "Beta result."]
    receipts = {r.call_id: r for r in ledger.receipts(run.run_id)}
    kid = child_id(run.run_id, "call_a")
    assert receipts["call_a"].evidence["child_session_id"] == kid
    assert receipts["call_a"].evidence["child_state"] == "completed"
    assert receipts["call_a"].evidence["child_run_id"] == ledger.runs_of(kid)[-1].run_id
    kinds = [
        e.payload.get("kind") for e in ledger.events(run.run_id) if e.type is EventType.CONTROL
    ]
    assert "parked" in kinds
    # the completions are acknowledged with the run, never shown as user input
    inbox = ledger.inbox(parent)
    assert {m.status.value for m in inbox} == {"acknowledged"} and len(inbox) == 2
    assert not any(
        e.type is EventType.USER_INPUT and e.payload.get("source") == "inbox"
        for e in ledger.events(run.run_id)
    )
    kids = child_ledger(ledger).children(parent)
    assert len(kids) == 2 and all(k.status is SessionStatus.DONE for k in kids)


def test_failed_child_is_adopted_as_an_error_never_success() -> None:
    w = World()
    parent = w.submit(parent_spec([task("call_a", "alpha"), task("call_x", "broken")]))
    w.pump()
    adopted = results(w.runner.ledger, parent)
    assert [e.payload["status"] for e in adopted] == [ToolStatus.OK.value, ToolStatus.ERROR.value]
    assert "failed/provider_error" in adopted[1].payload["content"]


def test_limits_and_unsupported_modes_get_clear_error_results() -> None:
    runner = memory_runner()
    runner.child_limits = ChildLimits(max_depth=3, max_per_session=1, max_running_per_root=9)
    w = World(runner)
    calls = [
        task("call_a", "alpha"),
        task("call_b", "beta"),
        task("call_c", "alpha", resume="not-a-child"),
        task("call_d", "nobody"),
    ]
    parent = w.submit(parent_spec(calls))
    w.pump()
    adopted = results(runner.ledger, parent)
    assert [e.call_id for e in adopted] == ["call_a", "call_b", "call_c", "call_d"]
    texts = [e.payload["content"] for e in adopted]
    assert texts[0] == "Alpha result."
    assert "maximum of 1 children" in texts[1]
    assert "not a child session of this session" in texts[2]
    assert "unknown agent 'nobody'" in texts[3]
    assert [e.payload["status"] for e in adopted[1:]] == ["error"] * 3
    assert len(child_ledger(runner.ledger).children(parent)) == 1
    run = runner.ledger.runs_of(parent)[-1]
    assert {r.call_id for r in runner.ledger.receipts(run.run_id)} == {c["id"] for c in calls}


def test_depth_limit_refuses_a_grandchild() -> None:
    runner = memory_runner()
    runner.child_limits = ChildLimits(max_depth=1, max_per_session=9, max_running_per_root=9)
    agents = {
        "mid": {
            "tools": ["Task"],
            "provider": {
                "kind": "scripted",
                "script": {
                    "turns": [
                        {"text": "deeper", "tool_calls": [task("call_leaf", "alpha")]},
                        {"text": "Mid done."},
                    ]
                },
            },
        },
        **AGENTS,
    }
    w = World(runner)
    spec = scripted_spec(
        [{"text": "go", "tool_calls": [task("call_mid", "mid")]}, {"text": "Root done."}],
        tools=["Task"],
        agents=agents,
    )
    root = w.submit(spec)
    w.pump()
    run = runner.ledger.runs_of(root)[-1]
    mid = child_id(run.run_id, "call_mid")
    leaf_result = results(runner.ledger, mid)[0]
    assert leaf_result.payload["status"] == "error"
    assert "maximum depth (1)" in leaf_result.payload["content"]
    assert runner.ledger.events(run.run_id)[-1].payload["state"] == "completed"


def test_repeated_delivery_and_recovery_never_spawn_a_second_child() -> None:
    w = World()
    parent = w.submit(parent_spec([task("call_a", "alpha"), task("call_b", "beta")]))
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    # a duplicate delivery of the parked parent: re-parks, writes no new child
    assert w.runner.run(parent) is SessionOutcome.PARKED
    ledger = w.runner.ledger
    assert len(child_ledger(ledger).children(parent)) == 2
    published_children = [sid for sid, _ in w.queue.published]
    assert len(published_children) == 2 and parent not in published_children
    w.pump()
    assert len(child_ledger(ledger).children(parent)) == 2
    assert [e.call_id for e in results(ledger, parent)] == ["call_a", "call_b"]
    assert ledger.get_session(parent).status is SessionStatus.DONE


def test_children_left_unpublished_by_a_crash_are_published_by_the_next_park() -> None:
    """An owner killed between committing its children and publishing them (beat off)."""
    w = World()
    parent = w.submit(parent_spec([task("call_a", "alpha"), task("call_b", "beta")]))
    first = w.queue.published.pop(0)[0]

    def broker_gone(_record: Any) -> None:
        raise ConnectionError("the owner died before publishing")

    w.runner.publish = broker_gone
    assert w.runner.run(first) is SessionOutcome.PARKED
    assert w.queue.published == []  # nothing reached the broker
    w.runner.publish = w.dispatcher.publish
    # the parent's next delivery (a follow-up or redelivery) parks again and publishes them
    assert w.runner.run(parent) is SessionOutcome.PARKED
    assert sorted(sid for sid, _ in w.queue.published) == sorted(
        child_id(w.runner.ledger.runs_of(parent)[-1].run_id, c) for c in ("call_a", "call_b")
    )
    w.pump()
    assert [e.call_id for e in results(w.runner.ledger, parent)] == ["call_a", "call_b"]
    assert w.runner.ledger.get_session(parent).status is SessionStatus.DONE
