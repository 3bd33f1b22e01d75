"""Any ledger history -> a payload each API accepts (issue 4, "what it must show").

Histories are built with the real commit-point builders of the loop
(turn_events, result_events, recovery_events) and crash anywhere between two
commits: a turn's results may be committed late, partly, or never, with or
without the recovery a new owner runs.  Whatever happened, the projected
transcript -- compacted to any budget -- must pass validators written from
each API's pairing rules (providers/validate.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.core.compaction import COMPACTED_PREFIX, compact, estimate_tokens
from nahida_workers.core.events import Event, EventType, ToolStatus
from nahida_workers.core.loop import CallResult, result_events, turn_events
from nahida_workers.core.messages import (
    AssistantMessage,
    ProviderRequest,
    ProviderTurn,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.core.recovery import recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.core.transcript import project
from nahida_workers.providers.payloads import anthropic_messages, openai_messages
from nahida_workers.testing.validate import (
    validate_anthropic_messages,
    validate_openai_messages,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)

step = st.one_of(
    st.tuples(st.just("user"), st.text(min_size=0, max_size=40)),
    st.tuples(
        st.just("turn"),
        st.text(min_size=0, max_size=40),
        st.integers(min_value=0, max_value=3),  # calls in the turn
        st.lists(st.booleans(), min_size=3, max_size=3),  # which results commit now
        st.booleans(),  # commit the missing results later (out of place)
    ),
    st.tuples(st.just("crash"), st.booleans()),  # a new owner: recovery or not
)


def _user(state: RunState, text: str) -> Event:
    return Event(
        run_id=state.run_id,
        sequence=state.next_sequence,
        type=EventType.USER_INPUT,
        payload={"text": text, "source": "steering"},
        created_at=NOW,
    )


def build(history: list[tuple[object, ...]]) -> RunState:
    """Apply a generated history through the loop's own event builders."""
    state = RunState(run_id="r")
    state.apply(_user(state, "the task"))
    late: list[CallResult] = []
    for n, item in enumerate(history):
        kind = item[0]
        if kind == "user":
            state.apply(_user(state, str(item[1])))
        elif kind == "turn":
            _, text, count, now_mask, later = item
            calls = tuple(
                ToolCall(call_id=f"c{n}_{i}", name="Read", arguments={"i": i})
                for i in range(count)  # type: ignore[call-overload]
            )
            for event in turn_events(
                state, ProviderTurn(text=str(text), tool_calls=calls), now=NOW
            ):
                state.apply(event)
            results = [
                CallResult(c.call_id, c.name, ToolStatus.OK, f"out {c.call_id}") for c in calls
            ]
            now = [r for r, keep in zip(results, now_mask, strict=False) if keep]  # type: ignore[call-overload]
            for event in result_events(state, now, now=NOW):
                state.apply(event)
            if later:
                late += [r for r in results if r not in now]
        else:
            if item[1]:
                for event in recovery_events(state, now=NOW, epoch=n + 2):
                    state.apply(event)
            pending = {c.call_id for c in state.pending_calls()}
            late_now = [r for r in late if r.call_id in pending]
            for event in result_events(state, late_now, now=NOW):
                state.apply(event)
            late = []
    return state


def _check_pairing(messages: list[object]) -> None:
    for i, message in enumerate(messages):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            following = messages[i + 1 : i + 1 + len(message.tool_calls)]
            assert [m.call_id for m in following if isinstance(m, ToolResultMessage)] == [
                c.call_id for c in message.tool_calls
            ]


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(step, max_size=12),
    budget=st.one_of(st.none(), st.integers(min_value=1, max_value=400)),
)
def test_any_history_projects_to_valid_payloads_for_both_apis(
    history: list[tuple[object, ...]], budget: int | None
) -> None:
    state = build(history)
    messages = project(state.events)
    _check_pairing(messages)
    if budget is not None:
        compacted = compact(messages, budget)
        _check_pairing(compacted)
        texts = [m.text for m in compacted if isinstance(m, UserMessage)]
        assert texts[0] == "the task", "the task is never dropped"
        latest = [m.text for m in messages if isinstance(m, UserMessage)][-1]
        assert latest in texts, "the latest user input is never dropped"
        if sum(estimate_tokens(m) for m in messages) <= budget:
            assert compacted == messages
        messages = compacted
    request = ProviderRequest(
        run_id="r", turn_index=state.turns, system="sys", messages=tuple(messages)
    )
    validate_openai_messages(openai_messages(request))
    validate_anthropic_messages(anthropic_messages(request))


def test_compaction_drops_whole_groups_oldest_first_and_says_so() -> None:
    history: list[tuple[object, ...]] = [
        ("turn", "t", 3, [True, True, True], False) for _ in range(30)
    ]
    messages = project(build(history).events)
    compacted = compact(messages, 200)
    assert sum(estimate_tokens(m) for m in compacted) <= 200
    note = next(
        m for m in compacted if isinstance(m, UserMessage) and m.text.startswith(COMPACTED_PREFIX)
    )
    assert "Read x" in note.text
    _check_pairing(compacted)
    # the newest turn survives intact
    assert compacted[-4:] == messages[-4:]
