"""Steering inbox, cancel and next runs through the whole loop (issue 6 items 1-2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.core.records import InboxStatus
from nahida_workers.errors import InboxFullError, UserError
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.tools import default_tools
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolRegistry, ToolSpec


class Steer(Tool):
    """A tool that posts a steering message while the run is busy (a person typing)."""

    inbox: ClassVar[Inbox | None] = None
    session_id: ClassVar[str] = ""
    spec = ToolSpec(name="Steer", description="t", input_schema={"type": "object"})

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        assert self.inbox is not None
        for _ in range(int(arguments.get("times", 1))):
            self.inbox.post(self.session_id, str(arguments["text"]), message_id=arguments.get("id"))
        return ToolOutcome(ToolStatus.OK, "posted")


def _world(turns: list[dict[str, Any]]) -> tuple[SessionRunner, Inbox, ListTaskQueue, str]:
    registry = ToolRegistry([*default_tools(), Steer()])
    runner = memory_runner(registry_for=lambda _spec: registry)
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    inbox = Inbox(runner.ledger, runner.leases, dispatcher, runner.clock)
    spec = scripted_spec(turns, tools=("LS", "Steer"))
    session, _ = dispatcher.submit(spec, workspace=".")
    Steer.inbox, Steer.session_id = inbox, session.session_id
    return runner, inbox, queue, session.session_id


def _inputs(runner: SessionRunner, session_id: str) -> list[tuple[str, str]]:
    out = []
    for run in runner.ledger.runs_of(session_id):
        out += [
            (str(e.payload.get("source")), str(e.payload.get("text")))
            for e in runner.ledger.events(run.run_id)
            if e.type is EventType.USER_INPUT
        ]
    return out


def test_steering_sent_mid_run_is_claimed_at_the_next_boundary_once(tmp_path: Path) -> None:
    turns = [
        {
            "text": "working",
            "tool_calls": [
                {
                    "id": "s",
                    "name": "Steer",
                    "arguments": {"text": "also check docs/", "id": "m-1", "times": 2},
                },
            ],
        },
        {"text": "Checked docs/ as asked."},
    ]
    runner, _inbox, _q, sid = _world(turns)
    runner.run(sid)
    (run,) = runner.ledger.runs_of(sid)
    events = runner.ledger.events(run.run_id)
    kinds = [(e.type.value, e.payload.get("source")) for e in events]
    result_at = next(i for i, e in enumerate(events) if e.type is EventType.TOOL_RESULT)
    steer_at = next(i for i, e in enumerate(events) if e.payload.get("source") == "inbox")
    answer_at = max(i for i, e in enumerate(events) if e.type is EventType.ASSISTANT_OUTPUT)
    assert result_at < steer_at < answer_at, kinds  # after the results, before the next turn
    assert _inputs(runner, sid).count(("inbox", "also check docs/")) == 1  # same id twice = once
    (message,) = runner.ledger.inbox(sid)
    assert message.status is InboxStatus.ACKNOWLEDGED and message.claimed_run_id == run.run_id
    assert run.terminal_state is not None and run.terminal_state.value == "completed"


def test_steering_that_arrives_while_the_model_answers_is_not_dropped(tmp_path: Path) -> None:
    """The pending-steering stage: an answer with steering waiting is not final."""
    from nahida_workers.providers.scripted import ScriptedProvider, load_script

    runner, inbox, _q, sid = _world([])
    scripted = ScriptedProvider(
        load_script({"turns": [{"text": "All done."}, {"text": "Done, docs/ included."}]})
    )

    class TypingWhileAnswering:
        name = model = "scripted"

        def complete(self, request: Any, **kw: Any) -> Any:
            if request.turn_index == 0:  # a person types while the model answers
                inbox.post(sid, "also cover docs/", message_id="late")
            return scripted.complete(request, **kw)

    runner.provider_for = lambda _spec: TypingWhileAnswering()  # type: ignore[assignment,return-value]
    runner.run(sid)
    (run,) = runner.ledger.runs_of(sid)
    events = runner.ledger.events(run.run_id)
    order = [
        e.payload.get("text")
        for e in events
        if e.type in (EventType.ASSISTANT_OUTPUT, EventType.USER_INPUT)
    ]
    assert order == ["test prompt", "All done.", "also cover docs/", "Done, docs/ included."]
    assert run.terminal_state is not None and run.terminal_state.value == "completed"
    assert events[-1].payload["final_text"] == "Done, docs/ included."


def test_input_after_the_run_sealed_starts_the_next_run(tmp_path: Path) -> None:
    runner, inbox, queue, sid = _world([{"text": "First answer."}])
    runner.run(sid)
    assert runner.ledger.get_session(sid).status.value == "done"  # type: ignore[union-attr]
    before = len(queue.published)
    _, created = inbox.post(sid, "follow-up question", message_id="f-1")
    assert created
    assert runner.ledger.get_session(sid).status.value == "queued"  # type: ignore[union-attr]
    assert len(queue.published) == before + 1  # re-dispatched
    _, again = inbox.post(sid, "follow-up question", message_id="f-1")
    assert not again and len(queue.published) == before + 1
    runner.run(sid)
    runs = runner.ledger.runs_of(sid)
    assert len(runs) == 2
    second = runner.ledger.events(runs[1].run_id)
    assert second[0].payload == {
        "text": "follow-up question",
        "source": "inbox",
        "message_id": "f-1",
        "kind": "user",
    }
    assert runner.ledger.get_session(sid).status.value == "done"  # type: ignore[union-attr]
    assert [m.status for m in runner.ledger.inbox(sid)] == [InboxStatus.ACKNOWLEDGED]
    # The later run is labelled like the first (it read "unknown" as its model,
    # which split the {provider, model} metric labels of one session).
    assert [(r.provider, r.model) for r in runs] == [("scripted", "scripted")] * 2


def test_inbox_limits_are_a_clear_error(tmp_path: Path) -> None:
    _runner, inbox, _q, sid = _world([{"text": "x"}])
    for i in range(20):
        inbox.post(sid, f"m{i}")
    with pytest.raises(InboxFullError):
        inbox.post(sid, "one too many")
    with pytest.raises(UserError):
        inbox.post(sid, "   ")


def test_cancelling_a_queued_session_seals_it_at_once_without_a_delivery(tmp_path: Path) -> None:
    from nahida_workers.runtime.observe.channel import MemorySink

    runner, inbox, queue, sid = _world([{"text": "never used"}])
    before = len(queue.published)
    inbox.sink = sink = MemorySink()
    report = inbox.cancel(sid)
    done = [e for e in sink.events if e.kind.value == "done"]  # a watcher sees the end
    assert [(e.session_id, e.data["terminal_state"]) for e in done] == [(sid, "cancelled")]
    assert report.sealed == (sid,) and report.flagged == ()
    assert len(queue.published) == before  # the cancel needed no worker slot
    (run,) = runner.ledger.runs_of(sid)
    assert (run.terminal_state.value, run.terminal_reason.value) == ("cancelled", "cancelled")  # type: ignore[union-attr]
    end = runner.ledger.events(run.run_id)[-1]
    assert end.payload["decided_by"] == "cancel"
    # A delivery still in the queue finds the session sealed and writes nothing.
    assert runner.run(sid).value == "already_done"
    assert [e.type.value for e in runner.ledger.events(run.run_id)] == ["user_input", "terminal"]
    with pytest.raises(UserError, match="nothing to cancel"):
        inbox.cancel(sid)


class CancelOnce(Tool):
    """Asks to cancel its own session, the first time only (a person at `nahida cancel`)."""

    inbox: ClassVar[Inbox | None] = None
    session_id: ClassVar[str] = ""
    done: ClassVar[bool] = False
    spec = ToolSpec(name="CancelOnce", description="t", input_schema={"type": "object"})

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        assert self.inbox is not None
        if not CancelOnce.done:
            CancelOnce.done = True
            self.inbox.cancel(self.session_id)
        return ToolOutcome(ToolStatus.OK, "asked")


def test_cancel_takes_earlier_steering_with_it_and_the_session_lives_on(tmp_path: Path) -> None:
    """Steer, then cancel, mid-run: one cancelled run that holds the steering message.

    The message was addressed to the work that was cancelled: it is recorded in
    the cancelled run (one ``user_input``, acknowledged), not replayed as a new
    run that the same cancel would end at once.  The cancel is consumed by the
    seal: input after it starts a run that completes.
    """
    turns = [
        {
            "text": "Working.",
            "tool_calls": [
                {"id": "s", "name": "Steer", "arguments": {"text": "also echo hi", "id": "s-1"}},
                {"id": "c", "name": "CancelOnce", "arguments": {}},
            ],
        },
        {"text": "Second answer."},
    ]
    registry = ToolRegistry([*default_tools(), Steer(), CancelOnce()])
    runner = memory_runner(registry_for=lambda _spec: registry)
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    inbox = Inbox(runner.ledger, runner.leases, dispatcher, runner.clock)
    session, _ = dispatcher.submit(
        scripted_spec(turns, tools=("Steer", "CancelOnce")), workspace="."
    )
    sid = session.session_id
    Steer.inbox, Steer.session_id = inbox, sid
    CancelOnce.inbox, CancelOnce.session_id, CancelOnce.done = inbox, sid, False

    runner.run(sid)
    (run,) = runner.ledger.runs_of(sid)
    assert (run.terminal_state.value, run.terminal_reason.value) == ("cancelled", "cancelled")  # type: ignore[union-attr]
    types = [e.type for e in runner.ledger.events(run.run_id)]
    assert types[-2:] == [EventType.USER_INPUT, EventType.TERMINAL], types
    assert _inputs(runner, sid)[-1] == ("inbox", "also echo hi")
    (message,) = runner.ledger.inbox(sid)
    assert (message.status, message.claimed_run_id) == (InboxStatus.ACKNOWLEDGED, run.run_id)
    after = runner.ledger.get_session(sid)
    assert after is not None and after.status.value == "done"
    assert after.cancel_requested_at is None, "the seal consumes the cancel request"

    inbox.post(sid, "now finish, please", message_id="f-1")
    runner.run(sid)
    first, second = runner.ledger.runs_of(sid)
    assert first.run_id == run.run_id
    assert second.terminal_state is not None and second.terminal_state.value == "completed"
