"""Bounds instead of a fixed turn cap (DESIGN.md section 6, issue 5 item 4).

Checked before each provider call, from the ledger alone:

* the same assistant text 3 times -> a change-strategy prompt;
* the same action signature (tool + input fingerprint) 8 times -> a prompt,
  16 times -> ``incomplete/doom_loop`` (successful repeats count too);
* 3 consecutive failures of one tool -> a hint;
* a token budget (provider-reported usage) -> ``incomplete/budget_exhausted``.

Each prompt is issued once per trigger and recorded as a ``control`` event,
so a run resumed by another worker does not repeat it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from nahida_workers.core.events import EventType, ReasonCode, TerminalState
from nahida_workers.core.state import RunState

__all__ = ["BoundLimits", "BoundPrompt", "BoundStop", "check_bounds"]


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
    return {
        (str(e.payload.get("bound")), str(e.payload.get("key")))
        for e in state.events
        if e.type is EventType.CONTROL and e.payload.get("kind") == "bound"
    }


def _tokens(state: RunState) -> int:
    total = 0
    for e in state.events:
        usage: Any = e.payload.get("usage") if e.type is EventType.ASSISTANT_OUTPUT else None
        if isinstance(usage, dict):
            total += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    return total


def check_bounds(state: RunState, limits: BoundLimits) -> BoundPrompt | BoundStop | None:
    """The first bound the run has hit that still needs acting on, or None."""
    if limits.token_budget is not None and _tokens(state) >= limits.token_budget:
        return BoundStop(ReasonCode.BUDGET_EXHAUSTED)
    issued = _issued(state)
    signatures = Counter((c.name, c.fingerprint) for c in state.calls.values())
    for (name, fingerprint), count in signatures.most_common(1):
        if count >= limits.action_stop_at:
            return BoundStop(ReasonCode.DOOM_LOOP)
        key = f"{name}:{fingerprint}"
        if count >= limits.action_prompt_at and ("repeated_action", key) not in issued:
            return BoundPrompt(
                "repeated_action",
                key,
                f"You have called {name} with the same input {count} times. Repeating it "
                "will not give a different result: change your approach, or answer with "
                "what you have.",
            )
    texts = Counter(
        str(e.payload.get("text", "")).strip()
        for e in state.events
        if e.type is EventType.ASSISTANT_OUTPUT and str(e.payload.get("text", "")).strip()
    )
    for text, count in texts.most_common(1):
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
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
    by_tool: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for call_id, payload in state.results.items():
        name = str(payload.get("name", ""))
        by_tool.setdefault(name, []).append((state.result_seq.get(call_id, 0), payload))
    for name, results in sorted(by_tool.items()):
        results.sort(key=lambda r: r[0])
        streak = 0
        for _seq, payload in reversed(results):
            if payload.get("status") == "ok" or payload.get("synthetic"):
                break
            streak += 1
        if streak < limits.tool_failure_hint_at:
            continue
        first_of_streak = results[-streak][0]
        key = f"{name}:{first_of_streak}"
        if ("tool_failures", key) in issued:
            continue
        last = str(results[-1][1].get("content", ""))[:300]
        return BoundPrompt(
            "tool_failures",
            key,
            f"{name} failed {streak} times in a row. The last error was: {last!r}. Check the "
            "arguments against the tool's schema, or try another approach.",
        )
    return None
