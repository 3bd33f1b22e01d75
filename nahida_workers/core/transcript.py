"""Transcript projection: ledger events → provider-neutral messages.

DESIGN.md section 3 step 1 and case B06.  The projection, not ledger order,
decides where a result goes: every assistant message with tool calls is
followed by exactly one result per call, in call order, taken from wherever
the result sits in the ledger.  A call with no result anywhere in history --
in the middle as well as at the tail -- gets a synthetic ``interrupted``
error result; a result whose call is unknown is dropped.  Text a user sent
after the calls comes after their results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.core.payloads import (
    INTERRUPTED_TEXT,
    call_from_payload,
    result_content,
    user_text,
)

__all__ = ["orphan_calls", "project"]


def project(
    events: Iterable[Event], *, memo: dict[tuple[object, ...], Message] | None = None
) -> list[Message]:
    """Project committed events (one run, or several runs in order) to messages.

    Args:
        events: committed events in order.
        memo: optional cache owned by the caller (``RunState`` keeps one):
            committed events never change, so a message built from the same
            events is reused instead of rebuilt on every provider turn.

    Returns:
        User, assistant and tool-result messages satisfying the pairing rule:
        after an assistant message with calls ``c1..cn`` come exactly the
        results of ``c1..cn`` in that order.
    """
    ordered = list(events)
    cache: dict[tuple[object, ...], Message] = memo if memo is not None else {}
    results: dict[str | None, Event] = {
        e.call_id: e for e in ordered if e.type is EventType.TOOL_RESULT and e.call_id is not None
    }
    messages: list[Message] = []
    turn: Event | None = None
    turn_calls: list[Event] = []
    for event in ordered:
        if event.type is EventType.ASSISTANT_OUTPUT:
            _close_turn(turn, turn_calls, results, cache, messages)
            turn, turn_calls = event, []
        elif event.type is EventType.TOOL_CALL:
            turn_calls.append(event)  # a call with no committed turn stays paired anyway
        elif event.type is EventType.USER_INPUT:
            _close_turn(turn, turn_calls, results, cache, messages)
            turn, turn_calls = None, []
            key = ("user", event.run_id, event.sequence)
            if key not in cache:
                cache[key] = UserMessage(text=user_text(event.payload))
            messages.append(cache[key])
    _close_turn(turn, turn_calls, results, cache, messages)
    return messages


def _close_turn(
    turn: Event | None,
    turn_calls: list[Event],
    results: dict[str | None, Event],
    cache: dict[tuple[object, ...], Message],
    messages: list[Message],
) -> None:
    """Append one assistant turn and, right after it, the results of its calls in order."""
    if turn is None and not turn_calls:
        return
    head = (turn.run_id, turn.sequence) if turn is not None else ("", -1)
    key = ("assistant", *head, len(turn_calls))
    calls = [_call(e, cache) for e in turn_calls]
    if key not in cache:
        text = str(turn.payload.get("text", "")) if turn is not None else ""
        blocks = turn.payload.get("content_blocks") if turn is not None else None
        cache[key] = AssistantMessage(
            text=text,
            tool_calls=tuple(calls),
            content_blocks=tuple(b for b in blocks if isinstance(b, dict))
            if isinstance(blocks, list) and not calls
            else (),
        )
    messages.append(cache[key])
    for event, call in zip(turn_calls, calls, strict=True):
        result = results.get(call.call_id)
        rkey = ("result", event.run_id, event.sequence, result.sequence if result else None)
        if rkey not in cache:
            cache[rkey] = _result_message(call, result)
        messages.append(cache[rkey])


def _call(event: Event, cache: dict[tuple[object, ...], Message]) -> ToolCall:
    key = ("call", event.run_id, event.sequence)
    if key not in cache:
        cache[key] = call_from_payload(event.payload)  # type: ignore[assignment]
    return cache[key]  # type: ignore[return-value]


def _result_message(call: ToolCall, event: Event | None) -> ToolResultMessage:
    if event is None:
        return ToolResultMessage(
            call_id=call.call_id, name=call.name, content=INTERRUPTED_TEXT, is_error=True
        )
    payload = event.payload
    return ToolResultMessage(
        call_id=call.call_id,
        name=call.name,
        content=result_content(payload),
        is_error=bool(payload.get("is_error", False)),
    )


def orphan_calls(events: Sequence[Event]) -> list[ToolCall]:
    """Committed calls that have no committed result, in ledger order (whole run)."""
    answered = {e.call_id for e in events if e.type is EventType.TOOL_RESULT}
    return [
        call_from_payload(e.payload)
        for e in events
        if e.type is EventType.TOOL_CALL and e.call_id not in answered
    ]
