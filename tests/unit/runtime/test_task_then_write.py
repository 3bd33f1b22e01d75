"""A turn ``[Task, Write]``: the Write runs after the child, its result after the Task's.

The loop runs a turn's calls in call order and nothing past a Task call
until its child's result is adopted (DESIGN.md sections 3 and 8).  The next
owner of the parked parent once took the unstarted Write for an orphan of a
lost worker: recovery closed it ``interrupted`` (the file was never written)
and recorded its result before the Task's, out of call order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from nahida_workers.core.events import Event, EventType, SessionStatus, ToolStatus
from nahida_workers.core.recovery import behind_open_task, recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.testing.doubles import scripted_spec
from tests.unit.runtime.test_children import AGENTS, World, results, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WRITE = {"id": "w", "name": "Write", "arguments": {"path": "out.txt", "content": "after\n"}}


def _turn(*calls: tuple[str, str], answered: tuple[str, ...] = ()) -> RunState:
    events = [
        Event(run_id="r", sequence=1, type=EventType.USER_INPUT, payload={"text": "go"}),
        Event(
            run_id="r",
            sequence=2,
            type=EventType.ASSISTANT_OUTPUT,
            payload={
                "text": "",
                "turn": 0,
                "stop_reason": "tool_calls",
                "call_ids": [c for c, _ in calls],
            },
        ),
    ]
    for call_id, name in calls:
        events.append(
            Event(run_id="r", sequence=len(events) + 1, type=EventType.TOOL_CALL, call_id=call_id,
                  payload={"call_id": call_id, "name": name, "arguments": {}})
        )  # fmt: skip
    for call_id in answered:
        events.append(
            Event(run_id="r", sequence=len(events) + 1, type=EventType.TOOL_RESULT,
                  call_id=call_id, payload={"call_id": call_id, "status": "ok", "content": "x"})
        )  # fmt: skip
    return RunState.from_ledger("r", events, [])


def test_a_call_behind_an_open_task_is_left_pending_by_every_next_owner() -> None:
    state = _turn(("t", "Task"), ("w", "Write"), ("e", "Edit"))
    assert behind_open_task(state) == {"w", "e"}
    for epoch in (2, 3, 7):  # any number of owners while the parent is parked
        assert recovery_events(state, now=NOW, epoch=epoch) == ()
    assert [c.call_id for c in state.pending_calls()] == ["t", "w", "e"]


def test_a_call_before_the_task_or_after_a_settled_one_is_closed_as_before() -> None:
    before = recovery_events(_turn(("w", "Write"), ("t", "Task")), now=NOW, epoch=2)
    assert before[0].payload["closed"] == ["w"]  # it ran before the Task: outcome unknown
    after = _turn(("t", "Task"), ("w", "Write"), answered=("t",))
    assert behind_open_task(after) == frozenset()
    events = recovery_events(after, now=NOW, epoch=2)
    assert events[0].payload["closed"] == ["w"]
    assert events[1].payload["status"] == ToolStatus.INTERRUPTED.value


def test_task_then_write_writes_the_file_after_the_child_in_call_order(tmp_path: Path) -> None:
    w = World()
    turns = [
        {"text": "Delegate, then write.", "tool_calls": [task("t", "alpha"), WRITE]},
        {"text": "Wrote out.txt after the child answered."},
    ]
    spec = scripted_spec(turns, tools=["Task", "Write"], agents=AGENTS)
    session, _ = w.dispatcher.submit(spec, workspace=str(tmp_path))
    w.pump()
    ledger = w.runner.ledger
    assert ledger.get_session(session.session_id).status is SessionStatus.DONE
    adopted = results(ledger, session.session_id)
    assert [e.call_id for e in adopted] == ["t", "w"]
    assert [e.payload["status"] for e in adopted] == ["ok", "ok"]
    assert not any(e.payload.get("synthetic") for e in adopted)
    assert (tmp_path / "out.txt").read_text() == "after\n"
