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
from nahida_workers.core.payloads import INTERRUPTED_TEXT, call_from_payload, result_content

__all__ = ["orphan_calls", "project"]


def project(events: Iterable[Event]) -> list[Message]:
    """Project committed events (one run, or several runs in order) to messages.

    Returns:
        User, assistant and tool-result messages satisfying the pairing rule:
        after an assistant message with calls ``c1..cn`` come exactly the
        results of ``c1..cn`` in that order.
    """
    ordered = list(events)
    results = {
        e.call_id: e for e in ordered if e.type is EventType.TOOL_RESULT and e.call_id is not None
    }
    messages: list[Message] = []
    turn_text: str | None = None
    turn_calls: list[ToolCall] = []

    def close_turn() -> None:
        nonlocal turn_text, turn_calls
        if turn_text is None:
            return
        messages.append(AssistantMessage(text=turn_text, tool_calls=tuple(turn_calls)))
        for call in turn_calls:
            messages.append(_result_message(call, results.get(call.call_id)))
        turn_text, turn_calls = None, []

    for event in ordered:
        if event.type is EventType.ASSISTANT_OUTPUT:
            close_turn()
            turn_text = str(event.payload.get("text", ""))
        elif event.type is EventType.TOOL_CALL:
            if turn_text is None:  # a call with no committed turn: keep it paired anyway
                turn_text = ""
            turn_calls.append(call_from_payload(event.payload))
        elif event.type is EventType.USER_INPUT:
            close_turn()
            messages.append(UserMessage(text=str(event.payload.get("text", ""))))
    close_turn()
    return messages


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
