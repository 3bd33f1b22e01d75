"""Compaction: fit a projected transcript into a token budget (DESIGN.md section 3).

The transcript is cut into *groups* that must stay whole: a user message, or
an assistant message together with the results of all its tool calls (a cut
never falls between a call and its results -- DESIGN.md section 3 step 1).
The oldest groups are dropped first and replaced by one short user note
naming what was left out.  Never dropped: the system prompt (it is not part of
the messages), the first user message (the task) and the latest user input.

Token counts are estimates (``estimate_tokens``: about four characters per
token for English and JSON, the common rule of thumb); a caller that knows the
provider's real count can pass its own estimator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["COMPACTED_PREFIX", "compact", "estimate_tokens", "groups"]

#: Start of the note that stands in for dropped groups.
COMPACTED_PREFIX = "[compacted]"


def estimate_tokens(message: Message) -> int:
    """Rough token count of one message: characters / 4, plus a per-message overhead."""
    if isinstance(message, UserMessage):
        size = len(message.text)
    elif isinstance(message, ToolResultMessage):
        size = len(message.content) + len(message.call_id)
    else:
        size = len(message.text) + sum(
            len(c.name) + len(json.dumps(c.arguments)) for c in message.tool_calls
        )
        if message.content_blocks:  # a paused turn goes back whole
            size += len(json.dumps(message.content_blocks, default=str))
    return size // 4 + 4


def groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Split messages into groups that must stay whole (assistant + its results)."""
    out: list[list[Message]] = []
    for message in messages:
        if isinstance(message, ToolResultMessage) and out and _open_turn(out[-1]):
            out[-1].append(message)
        else:
            out.append([message])
    return out


def _open_turn(group: list[Message]) -> bool:
    head = group[0]
    return isinstance(head, AssistantMessage) and len(group) - 1 < len(head.tool_calls)


def _note(dropped: list[list[Message]]) -> UserMessage:
    calls = [c for g in dropped for m in g if isinstance(m, AssistantMessage) for c in m.tool_calls]
    names: dict[str, int] = {}
    for call in calls:
        names[call.name] = names.get(call.name, 0) + 1
    done = ", ".join(f"{n} x{k}" for n, k in sorted(names.items())) or "no tool calls"
    count = sum(len(g) for g in dropped)
    return UserMessage(
        text=f"{COMPACTED_PREFIX} {count} earlier messages were left out to fit the context "
        f"budget (tool calls in them: {done}). Their results are in the run's ledger."
    )


def compact(
    messages: Sequence[Message],
    budget_tokens: int,
    *,
    estimate: Callable[[Message], int] = estimate_tokens,
) -> list[Message]:
    """The messages, with the oldest whole groups dropped until they fit ``budget_tokens``.

    Returns the input unchanged when it fits.  When even the protected groups
    (the first and the latest user input, and the last group) exceed the
    budget, returns the protected part: the model gets the task and the most
    recent state rather than nothing.
    """
    if sum(estimate(m) for m in messages) <= budget_tokens:
        return list(messages)
    parts = groups(messages)
    first_user = next((i for i, g in enumerate(parts) if isinstance(g[0], UserMessage)), None)
    last_user = next(
        (i for i in range(len(parts) - 1, -1, -1) if isinstance(parts[i][0], UserMessage)), None
    )
    protected = {i for i in (first_user, last_user, len(parts) - 1) if i is not None}
    cost = [sum(estimate(m) for m in g) for g in parts]
    note_cost = estimate(_note([]))
    total = sum(cost) + note_cost
    dropped: list[int] = []
    for i in range(len(parts)):  # oldest first
        if total <= budget_tokens:
            break
        if i in protected:
            continue
        dropped.append(i)
        total -= cost[i]
    if not dropped:
        return list(messages)
    gone = set(dropped)
    out: list[Message] = []
    run: list[list[Message]] = []
    for i, group in enumerate(parts):
        if i in gone:
            run.append(group)
            continue
        if run:  # one note per stretch of dropped groups keeps the roles alternating
            out.append(_note(run))
            run = []
        out.extend(group)
    if run:
        out.append(_note(run))
    return out
