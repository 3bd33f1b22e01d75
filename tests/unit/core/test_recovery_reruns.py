"""An idempotent call whose re-run was lost too is closed, not re-run again (issue 11 item 2).

A Grep that froze its worker was re-run by each next owner, which froze in
turn: the epoch reached 7 in 7 minutes.  Recovery records each re-run and
re-runs a call at most ``MAX_RERUNS`` times.
"""

from __future__ import annotations

from datetime import UTC, datetime

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.recovery import MAX_RERUNS, RERUN_LOST_TEXT, recovery_events
from nahida_workers.core.state import RunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _state(*extra: Event) -> RunState:
    events = [
        Event(run_id="r", sequence=1, type=EventType.USER_INPUT, payload={"text": "go"}),
        Event(
            run_id="r",
            sequence=2,
            type=EventType.ASSISTANT_OUTPUT,
            payload={"text": "", "turn": 0, "stop_reason": "tool_calls", "call_ids": ["g"]},
        ),
        Event(
            run_id="r",
            sequence=3,
            type=EventType.TOOL_CALL,
            call_id="g",
            payload={"call_id": "g", "name": "Grep", "arguments": {"pattern": "^(a+)+$"}},
        ),
        *extra,
    ]
    return RunState.from_ledger("r", events, [])


def _apply(state: RunState, events: tuple[Event, ...]) -> RunState:
    for event in events:
        state.apply(event)
    return state


def test_the_first_owner_after_a_loss_reruns_and_records_it() -> None:
    state = _state()
    events = recovery_events(state, now=NOW, epoch=2, rerunnable=lambda _c: True)
    assert [e.type for e in events] == [EventType.CONTROL]
    assert events[0].payload["rerun"] == ["g"]
    assert "g" in {c.call_id for c in _apply(state, events).pending_calls()}


def test_recovery_twice_by_one_owner_changes_nothing() -> None:
    state = _state()
    state = _apply(state, recovery_events(state, now=NOW, epoch=2, rerunnable=lambda _c: True))
    assert recovery_events(state, now=NOW, epoch=2, rerunnable=lambda _c: True) == ()


def test_a_rerun_that_was_lost_too_is_closed_not_rerun_again() -> None:
    state = _state()
    for epoch in range(2, 2 + MAX_RERUNS):
        state = _apply(
            state, recovery_events(state, now=NOW, epoch=epoch, rerunnable=lambda _c: True)
        )
    events = recovery_events(state, now=NOW, epoch=9, rerunnable=lambda _c: True)
    control, result = events
    assert control.payload["closed"] == ["g"] and control.payload["rerun"] == []
    assert result.call_id == "g" and result.payload["status"] == "interrupted"
    assert result.payload["content"] == RERUN_LOST_TEXT
    assert not _apply(state, events).pending_calls()
