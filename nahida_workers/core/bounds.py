"""Bounds instead of a fixed turn cap (DESIGN.md section 6).

What counts, from the ledger alone:

* the same assistant text in 3 *consecutive* turns that have text -> a
  change-strategy prompt;
* the same action signature (tool + input fingerprint) in consecutive calls
  -> a prompt at 8, ``incomplete/doom_loop`` at 16.  Calls count as they
  are executed, inside one provider turn as well as across turns: a call
  that would take the streak past the stop bound is not run (it gets an
  error result, recorded and paired; :func:`calls_within_bound`).  A
  successful result that shows progress -- an output different from the
  previous call's, which the model saw before it repeated the call in a
  later turn -- breaks the streak, so polling a changing status, or running
  the same test command between edits, is never stopped.  Calls of one turn
  were made blind (no result in between), so they never show progress;
* 3 consecutive failures of one tool -> a hint;
* a token budget (provider-reported usage) -> ``incomplete/budget_exhausted``.

Each prompt is issued once per trigger and recorded as a ``control`` event,
so a run resumed by another worker does not repeat it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nahida_workers.core.events import Event, EventType, ReasonCode, TerminalState, ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import result_payload
from nahida_workers.core.state import RunState
from nahida_workers.core.tallies import Streak, StreakFold, step

__all__ = [
    "BoundLimits",
    "BoundPrompt",
    "BoundStop",
    "Streak",
    "action_streak",
    "calls_within_bound",
    "check_bounds",
    "refusal_events",
]


@dataclass(frozen=True)
class BoundLimits:
    """The bounds' thresholds (each a named setting of the job's ``limits``)."""

    repeated_text_at: int = 3
    action_prompt_at: int = 8
    action_stop_at: int = 16
    tool_failure_hint_at: int = 3
    truncation_recoveries: int = 3
    token_budget: int | None = None


@dataclass(frozen=True)
class BoundPrompt:
    """Tell the model something before its next turn (``key`` identifies the trigger)."""

    bound: str
    key: str
    text: str


@dataclass(frozen=True)
class BoundStop:
    """End the run ``incomplete`` for ``reason``."""

    reason: ReasonCode
    state: TerminalState = TerminalState.INCOMPLETE


def _issued(state: RunState) -> set[tuple[str, str]]:
    return state.tallies.issued


def _tokens(state: RunState) -> int:
    return state.tallies.tokens


def action_streak(state: RunState, *, through: str | None = None) -> Streak | None:
    """The trailing streak over the run's committed calls (through call ``through``).

    A call without a result yet counts as a repeat with no progress: it was
    made in the same turn as the calls before it, blind.  Starts from the
    fold over the answered prefix kept in ``state.tallies`` and folds only
    the calls after it (``core/tallies.py``).
    """
    tallies = state.tallies
    order = tallies.order
    start, fold = tallies.done, tallies.checkpoint
    if through is not None and tallies.index.get(through, len(order)) < start:
        start, fold = 0, StreakFold()  # inside the answered prefix: fold it again
    for call_id in order[start:]:
        call = state.calls[call_id]
        fold = step(fold, call, state.call_turn.get(call_id, -1), state.results.get(call_id))
        if call_id == through:
            break
    return fold.streak


def calls_within_bound(state: RunState, pending: Sequence[ToolCall], limits: BoundLimits) -> int:
    """How many of ``pending`` (committed calls without a result, in order) may run.

    Returns ``len(pending)`` when none would take its streak past
    ``action_stop_at``; otherwise the index of the first that would: it, and
    every call after it, must not run.
    """
    for index, streak in enumerate(_streaks_through(state, pending)):
        if streak is not None and streak.count > limits.action_stop_at:
            return index
    return len(pending)


def _streaks_through(state: RunState, pending: Sequence[ToolCall]) -> list[Streak | None]:
    """``action_streak(state, through=c.call_id)`` for each ``c`` of ``pending``, in one fold."""
    tallies = state.tallies
    wanted = {c.call_id for c in pending}
    first = min((tallies.index.get(c, len(tallies.order)) for c in wanted), default=0)
    if first < tallies.done:  # a pending call inside the answered prefix: one by one
        return [action_streak(state, through=c.call_id) for c in pending]
    found: dict[str, Streak | None] = {}
    fold = tallies.checkpoint
    for call_id in tallies.order[tallies.done :]:
        fold = step(
            fold, state.calls[call_id], state.call_turn.get(call_id, -1), state.results.get(call_id)
        )
        if call_id in wanted:
            found[call_id] = fold.streak
            if len(found) == len(wanted):
                break
    return [found.get(c.call_id, fold.streak) for c in pending]


def refusal_events(
    state: RunState, pending: Sequence[ToolCall], *, now: datetime
) -> tuple[Event, ...]:
    """Error results for the calls the stop bound keeps from running (DESIGN.md section 6).

    Every call still waiting gets one -- the run ends at the next boundary
    (:func:`check_bounds`), so none of them will run -- recorded and paired
    like any result, with ``reason: doom_loop``.
    """
    streak = action_streak(state, through=pending[0].call_id)
    count = streak.count if streak is not None else 0
    events = []
    for i, call in enumerate(pending):
        payload = result_payload(
            call_id=call.call_id,
            name=call.name,
            status=ToolStatus.ERROR,
            content=f"not run: {call.name} was called with the same input {count} times in a "
            "row, past the run's repeat bound; the run stops here (doom loop)."
            if i == 0
            else "not run: the run stopped at the repeat bound (doom loop) before this call.",
        )
        payload["reason"] = ReasonCode.DOOM_LOOP.value
        events.append(
            Event(
                run_id=state.run_id,
                sequence=state.next_sequence + i,
                type=EventType.TOOL_RESULT,
                payload=payload,
                call_id=call.call_id,
                created_at=now,
            )
        )
    return tuple(events)


def _text_streak(state: RunState) -> tuple[str, int, int] | None:
    """``(text, count, first sequence)`` of the trailing run of identical turn texts."""
    return state.tallies.text


def check_bounds(state: RunState, limits: BoundLimits) -> BoundPrompt | BoundStop | None:
    """The first bound the run has hit that still needs acting on, or None."""
    if limits.token_budget is not None and _tokens(state) >= limits.token_budget:
        return BoundStop(ReasonCode.BUDGET_EXHAUSTED)
    issued = _issued(state)
    streak = action_streak(state)
    if streak is not None:
        if streak.count >= limits.action_stop_at:
            return BoundStop(ReasonCode.DOOM_LOOP)
        key = f"{streak.name}:{streak.fingerprint}:{streak.first_call_id}"
        if streak.count >= limits.action_prompt_at and ("repeated_action", key) not in issued:
            return BoundPrompt(
                "repeated_action",
                key,
                f"You have called {streak.name} with the same input {streak.count} times in a "
                "row. Repeating it will not give a different result: change your approach, "
                "or answer with what you have.",
            )
    texts = _text_streak(state)
    if texts is not None:
        text, count, first = texts
        key = f"{hashlib.sha256(text.encode()).hexdigest()[:16]}:{first}"
        if count >= limits.repeated_text_at and ("repeated_text", key) not in issued:
            return BoundPrompt(
                "repeated_text",
                key,
                f"You have written the same reply {count} times. Change strategy: try a "
                "different tool or input, or explain what blocks you.",
            )
    return _failure_streak(state, limits, issued)


def _failure_streak(
    state: RunState, limits: BoundLimits, issued: set[tuple[str, str]]
) -> BoundPrompt | None:
    for name, run in sorted(state.tallies.failures.items()):
        if run.count < limits.tool_failure_hint_at:
            continue
        key = f"{name}:{run.first_seq}"
        if ("tool_failures", key) in issued:
            continue
        last = str(run.last.get("content", ""))[:300]
        return BoundPrompt(
            "tool_failures",
            key,
            f"{name} failed {run.count} times in a row. The last error was: {last!r}. Check the "
            "arguments against the tool's schema, or try another approach.",
        )
    return None
