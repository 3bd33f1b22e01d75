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
    shown_arguments,
    shown_text,
    user_text,
)

__all__ = ["Projection", "orphan_calls", "project"]


def project(
    events: Iterable[Event], *, memo: dict[tuple[object, ...], Message] | None = None
) -> list[Message]:
    """Project committed events (one run, or several runs in order) to messages.

    Args:
        events: committed events in order.
        memo: optional cache owned by the caller: committed events never
            change, so a message built from the same events is reused
            instead of rebuilt.

    Returns:
        User, assistant and tool-result messages satisfying the pairing rule:
        after an assistant message with calls ``c1..cn`` come exactly the
        results of ``c1..cn`` in that order.
    """
    projection = Projection(memo=memo)
    projection.feed(events)
    return projection.messages()


class Projection:
    """The projection of a growing event list, built from what is new (linear cost).

    Feed committed events in order (:meth:`feed`, or :meth:`follow` for a
    list that only grows); :meth:`messages` returns exactly what
    :func:`project` returns for every event fed so far.  Groups (a user
    message, or an assistant turn with its calls) whose calls all have
    their results can never change again -- a result is committed once per
    call (DESIGN.md section 2) -- so their messages are appended once to a
    settled prefix; only the groups after the first one still waiting for a
    result (normally the latest turn) are projected again on each call.

    Attributes:
        fed: events fed so far.
        settled: messages of the settled groups, in order (grows only).
    """

    def __init__(self, *, memo: dict[tuple[object, ...], Message] | None = None) -> None:
        self.cache: dict[tuple[object, ...], Message] = memo if memo is not None else {}
        self.fed = 0
        self.settled: list[Message] = []
        self._results: dict[str | None, Event] = {}
        self._groups: list[tuple[Event | None, list[Event]]] = []  # (user or turn, its calls)
        self._done = 0  # groups whose messages are in ``settled``

    def follow(self, *parts: Sequence[Event]) -> None:
        """Feed the events of ``parts`` (concatenated) not fed yet; each part only grows."""
        skip = self.fed
        for part in parts:
            if skip >= len(part):
                skip -= len(part)
                continue
            self.feed(part[skip:])
            skip = 0

    def feed(self, events: Iterable[Event]) -> None:
        """Fold more committed events, in order."""
        for event in events:
            self.fed += 1
            kind = event.type
            if kind is EventType.ASSISTANT_OUTPUT:
                self._groups.append((event, []))
            elif kind is EventType.TOOL_CALL:
                last = self._groups[-1][0] if self._groups else None
                if not self._groups or (last is not None and last.type is EventType.USER_INPUT):
                    self._groups.append((None, []))  # a call with no committed turn stays paired

                self._groups[-1][1].append(event)
            elif kind is EventType.USER_INPUT:
                self._groups.append((event, []))
            elif kind is EventType.TOOL_RESULT and event.call_id is not None:
                if event.call_id in self._results:  # a second result: settle nothing early
                    self._done, self.settled = 0, []
                self._results[event.call_id] = event

    def messages(self) -> list[Message]:
        """The projected messages of everything fed so far (as :func:`project`)."""
        settled, tail = self.parts()
        return [*settled, *tail]

    def parts(self) -> tuple[list[Message], list[Message]]:
        """``(settled, tail)``: the messages, split where groups may still change.

        ``settled`` is this object's own list (it only grows; do not modify it).
        """
        groups, results = self._groups, self._results
        while self._done < len(groups) - 1:  # the latest group may still get calls
            head, calls = groups[self._done]
            if any(c.call_id not in results for c in calls):
                break
            self._render(head, calls, self.settled)
            self._done += 1
        tail: list[Message] = []
        for head, calls in groups[self._done :]:
            self._render(head, calls, tail)
        return self.settled, tail

    def _render(self, head: Event | None, calls: list[Event], out: list[Message]) -> None:
        if head is not None and head.type is EventType.USER_INPUT:
            key = ("user", head.run_id, head.sequence)
            if key not in self.cache:
                self.cache[key] = UserMessage(text=user_text(head.payload))
            out.append(self.cache[key])
        else:
            _close_turn(head, calls, self._results, self.cache, out)


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
        text = shown_text(turn.payload.get("text", "")) if turn is not None else ""
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
        call = call_from_payload(event.payload)
        shown = shown_arguments(call.arguments)  # a capped argument is shown as text
        if shown != call.arguments:
            call = call.model_copy(update={"arguments": shown})
        cache[key] = call  # type: ignore[assignment]
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
