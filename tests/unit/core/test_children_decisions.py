"""The pure loop's child-session decisions: park or adopt, in call order (issue 13 A)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nahida_workers.core.children import (
    AdoptChildren,
    ChildView,
    Park,
    adopted_result,
    parse_task,
)
from nahida_workers.core.events import Event, EventType, TerminalState, ToolStatus
from nahida_workers.core.loop import LoopConfig, RunBatch, Signals, decide, turn_events
from nahida_workers.core.messages import ProviderTurn, ToolCall
from nahida_workers.core.state import RunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def args(agent: str = "leaf", **extra: Any) -> dict[str, Any]:
    return {"description": "d", "prompt": "p", "agent": agent, **extra}


def state_with(*calls: ToolCall) -> RunState:
    state = RunState.from_ledger(
        "run-1",
        [Event(run_id="run-1", sequence=1, type=EventType.USER_INPUT, payload={"text": "go"})],
    )
    for e in turn_events(state, ProviderTurn(text="t", tool_calls=calls), now=NOW):
        state.apply(e)
    return state


def done(call_id: str, state: TerminalState = TerminalState.COMPLETED) -> ChildView:
    return ChildView(call_id, f"kid-{call_id}", state=state, reason="r", final_text="T", run_id="x")


def test_running_children_park_the_session_on_every_unfinished_one() -> None:
    state = state_with(ToolCall(call_id="a", name="Task"), ToolCall(call_id="b", name="Task"))
    children = {"a": ChildView("a", "kid-a"), "b": ChildView("b", "kid-b")}
    decision = decide(state, LoopConfig(), Signals(now=NOW, children=children))
    assert decision == Park(awaiting=("kid-a", "kid-b"), calls=("a", "b"))


def test_only_the_settled_prefix_is_adopted_so_results_keep_call_order() -> None:
    state = state_with(*(ToolCall(call_id=c, name="Task") for c in "abc"))
    children = {"a": done("a"), "b": ChildView("b", "kid-b"), "c": done("c")}
    decision = decide(state, LoopConfig(), Signals(now=NOW, children=children))
    assert isinstance(decision, AdoptChildren)
    assert [v.call_id for v in decision.views] == ["a"]


def test_a_call_without_a_view_is_settled_as_refused_never_waits() -> None:
    state = state_with(ToolCall(call_id="a", name="Task"))
    decision = decide(state, LoopConfig(), Signals(now=NOW))
    assert isinstance(decision, AdoptChildren) and decision.views[0].refused


def test_tools_before_a_task_call_run_first_and_task_calls_never_enter_a_batch() -> None:
    state = state_with(ToolCall(call_id="r", name="Read"), ToolCall(call_id="a", name="Task"))
    decision = decide(state, LoopConfig(may_fan_out=lambda _n: True), Signals(now=NOW))
    assert isinstance(decision, RunBatch) and decision.batch.call_ids == ("r",)


def test_only_completed_is_success() -> None:
    assert adopted_result(done("a")) == (ToolStatus.OK, "T")
    for state in (TerminalState.FAILED, TerminalState.INCOMPLETE, TerminalState.UNVERIFIED):
        status, text = adopted_result(done("a", state))
        assert status is ToolStatus.ERROR and state.value in text
    assert adopted_result(ChildView("a", refused="no"))[0] is ToolStatus.ERROR


def test_parse_task_validates_and_refuses_bad_arguments_clearly() -> None:
    ok = parse_task(ToolCall(call_id="a", name="Task", arguments=args()), ["leaf"])
    assert not isinstance(ok, str) and ok.agent == "leaf"
    bg = parse_task(ToolCall(call_id="a", name="Task", arguments=args(mode="background")), ["leaf"])
    assert not isinstance(bg, str) and bg.mode.value == "background"
    resumed = parse_task(
        ToolCall(call_id="a", name="Task", arguments=args(mode="background", resume="k")), ["leaf"]
    )
    assert not isinstance(resumed, str) and resumed.resume == "k"
    assert resumed.mode.value == "foreground"  # a resumed call is waited on
    cases = {
        "unknown agent": args("nobody"),
        "not a valid TaskMode": args(mode="later"),
        "'resume' must be": args(resume=""),
        "'prompt' must be": {"description": "d", "agent": "leaf"},
        "unknown argument": args(colour="red"),
    }
    for expected, given in cases.items():
        result = parse_task(ToolCall(call_id="a", name="Task", arguments=given), ["leaf"])
        assert isinstance(result, str) and expected in result, (expected, result)
