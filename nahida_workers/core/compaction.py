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
from typing import Any

from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["COMPACTED_PREFIX", "Compactor", "compact", "estimate_tokens", "groups"]

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


def _names(group: Sequence[Message]) -> dict[str, int]:
    names: dict[str, int] = {}
    for message in group:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                names[call.name] = names.get(call.name, 0) + 1
    return names


def _note(dropped: list[list[Message]]) -> UserMessage:
    names: dict[str, int] = {}
    for group in dropped:
        for name, k in _names(group).items():
            names[name] = names.get(name, 0) + k
    return _note_of(sum(len(g) for g in dropped), names)


def _note_of(count: int, names: dict[str, int]) -> UserMessage:
    """The note standing in for ``count`` dropped messages with these tool-call counts."""
    done = ", ".join(f"{n} x{k}" for n, k in sorted(names.items()) if k) or "no tool calls"
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


class Compactor:
    """:func:`compact` over a transcript that grows at its end, from what is new (linear cost).

    The caller passes the transcript as a *settled* prefix that only grows
    between calls (whole groups that never change: ``Projection.settled``)
    and a short tail.  Token estimates, group boundaries, and running sums of
    costs and tool-call names are kept for the prefix, so a call costs the
    tail plus the messages kept -- dropped groups are counted, never walked.
    The result equals ``compact([*settled, *tail], budget, estimate=estimate)``
    (DESIGN.md section 3: the same whole groups, oldest first, the same notes).

    Args:
        estimate: tokens of one message (as for :func:`compact`).
    """

    def __init__(self, estimate: Callable[[Message], int] = estimate_tokens) -> None:
        self.estimate = estimate
        self._seen = 0  # settled messages taken in
        self._starts: list[int] = []  # first message index of each settled group
        self._cum: list[int] = [0]  # _cum[i]: tokens of settled groups [:i]
        self._names: list[dict[str, int]] = [{}]  # _names[i]: tool-call names in groups [:i]
        self._first_user: int | None = None
        self._last_user: int | None = None
        self._open = 0  # results the latest settled group still takes
        self._note_cost: int | None = None

    def _take(self, settled: Sequence[Message]) -> None:
        for index in range(self._seen, len(settled)):
            message = settled[index]
            cost = self.estimate(message)
            if isinstance(message, ToolResultMessage) and self._open > 0:
                self._cum[-1] += cost
                self._open -= 1
                continue
            group = len(self._starts)
            self._starts.append(index)
            self._cum.append(self._cum[-1] + cost)
            names = self._names[-1]
            if isinstance(message, AssistantMessage) and message.tool_calls:
                names = dict(names)
                for name, k in _names([message]).items():
                    names[name] = names.get(name, 0) + k
            self._names.append(names)
            self._open = len(message.tool_calls) if isinstance(message, AssistantMessage) else 0
            if isinstance(message, UserMessage):
                self._first_user = group if self._first_user is None else self._first_user
                self._last_user = group
        self._seen = len(settled)

    def __call__(
        self, settled: Sequence[Message], tail: Sequence[Message], budget_tokens: int
    ) -> list[Message]:
        """``compact([*settled, *tail], budget_tokens)``; ``settled`` only grows between calls."""
        if len(settled) < self._seen:
            raise ValueError("the settled messages shrank")
        self._take(settled)
        if self._open > 0:  # a tail result would join a settled group: no shortcut
            return compact([*settled, *tail], budget_tokens, estimate=self.estimate)
        parts = groups(tail)
        tail_cum = [self._cum[-1]]
        for group in parts:
            tail_cum.append(tail_cum[-1] + sum(self.estimate(m) for m in group))
        if tail_cum[-1] <= budget_tokens:
            return [*settled, *tail]
        done = len(self._starts)
        count = done + len(parts)
        cum = _Joined(self._cum, tail_cum[1:])
        users = [done + i for i, g in enumerate(parts) if isinstance(g[0], UserMessage)]
        first_user = self._first_user if self._first_user is not None else next(iter(users), None)
        last_user = users[-1] if users else self._last_user
        protected = sorted({i for i in (first_user, last_user, count - 1) if i is not None})
        if self._note_cost is None:
            self._note_cost = self.estimate(_note([]))
        excess = tail_cum[-1] + self._note_cost - budget_tokens

        def removed(last: int) -> int:  # tokens dropped when groups [0..last] are considered
            return int(cum[last + 1]) - sum(
                int(cum[p + 1] - cum[p]) for p in protected if p <= last
            )

        lo, hi = 0, count - 1
        if removed(hi) >= excess:
            while lo < hi:  # the first group after which the rest fits
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if removed(mid) >= excess else (mid + 1, hi)
        last = hi
        if sum(1 for p in protected if p <= last) == last + 1:  # nothing to drop
            return [*settled, *tail]
        return self._build(settled, tail, parts, protected, last)

    def _build(
        self,
        settled: Sequence[Message],
        tail: Sequence[Message],
        parts: list[list[Message]],
        protected: list[int],
        last: int,
    ) -> list[Message]:
        done = len(self._starts)
        starts = [*self._starts, len(settled)]
        for group in parts:
            starts.append(starts[-1] + len(group))
        everything = _Joined(settled, tail)

        def names(i: int) -> dict[str, int]:
            if i <= done:
                return self._names[i]
            out = dict(self._names[done])
            for group in parts[: i - done]:
                for name, k in _names(group).items():
                    out[name] = out.get(name, 0) + k
            return out

        out: list[Message] = []
        start = 0  # first group of the current stretch of dropped groups
        for keep in [*(p for p in protected if p <= last), last + 1]:
            if keep > start:
                before, after = names(start), names(keep)
                diff = {n: k - before.get(n, 0) for n, k in after.items()}
                out.append(_note_of(starts[keep] - starts[start], diff))
            if keep <= last:
                out.extend(everything.slice(starts[keep], starts[keep + 1]))
            start = keep + 1
        out.extend(everything.slice(starts[last + 1], starts[-1]))
        return out


class _Joined:
    """Two sequences read as one, without copying them (settled prefix + tail)."""

    def __init__(self, head: Sequence[Any], rest: Sequence[Any]) -> None:
        self.head, self.rest = head, rest

    def __getitem__(self, i: int) -> Any:
        return self.head[i] if i < len(self.head) else self.rest[i - len(self.head)]

    def slice(self, a: int, b: int) -> list[Any]:
        n = len(self.head)
        return [*self.head[a : min(b, n)], *self.rest[max(a - n, 0) : max(b - n, 0)]]
