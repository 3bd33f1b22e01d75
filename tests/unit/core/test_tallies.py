"""Bound counters folded event by event equal the full scans they replace (issue 15 item 3).

``core/tallies.py`` keeps the loop bounds' counters in the run state so a
turn's checks cost what is new, not the whole history.  Here every
generated history -- repeats, progress, failures, unanswered calls, results
committed late, bound prompts, text repeats, token usage -- is checked after
every commit against the full scans of the run's events (the code the
counters replaced, kept below as the reference), and a state rebuilt from
the events alone (a takeover) gets the same answers.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.core.bounds import (
    BoundLimits,
    BoundPrompt,
    Streak,
    action_streak,
    calls_within_bound,
    check_bounds,
)
from nahida_workers.core.events import Event, EventType
from nahida_workers.core.state import RunState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = BoundLimits(
    repeated_text_at=2,
    action_prompt_at=3,
    action_stop_at=4,
    tool_failure_hint_at=2,
    token_budget=400,
)


# -- the full scans the counters replaced (reference) ------------------------


def ref_streak(state: RunState, through: str | None = None) -> Streak | None:
    streak: Streak | None = None
    prev_turn: int | None = None
    prev: dict[str, Any] | None = None
    for call in state.calls.values():
        turn = state.call_turn.get(call.call_id, -1)
        result = state.results.get(call.call_id)
        same = streak is not None and (streak.name, streak.fingerprint) == (
            call.name,
            call.fingerprint,
        )
        progress = (
            same
            and result is not None
            and result.get("status") == "ok"
            and prev_turn is not None
            and turn > prev_turn
            and result.get("content") != (prev or {}).get("content")
        )
        if same and not progress:
            assert streak is not None
            streak = Streak(streak.name, streak.fingerprint, streak.count + 1, streak.first_call_id)
        else:
            streak = Streak(call.name, call.fingerprint, 1, call.call_id)
        prev_turn, prev = turn, result
        if call.call_id == through:
            break
    return streak


def ref_check(state: RunState, limits: BoundLimits) -> object:
    events = state.events
    tokens = sum(
        int(e.payload["usage"].get("input_tokens", 0))
        + int(e.payload["usage"].get("output_tokens", 0))
        for e in events
        if e.type is EventType.ASSISTANT_OUTPUT and isinstance(e.payload.get("usage"), dict)
    )
    if limits.token_budget is not None and tokens >= limits.token_budget:
        return ("stop", "budget_exhausted")
    issued = {
        (str(e.payload.get("bound")), str(e.payload.get("key")))
        for e in events
        if e.type is EventType.CONTROL and e.payload.get("kind") == "bound"
    }
    streak = ref_streak(state)
    if streak is not None:
        if streak.count >= limits.action_stop_at:
            return ("stop", "doom_loop")
        key = f"{streak.name}:{streak.fingerprint}:{streak.first_call_id}"
        if streak.count >= limits.action_prompt_at and ("repeated_action", key) not in issued:
            return ("repeated_action", key)
    found: tuple[str, int, int] | None = None
    for e in events:
        text = str(e.payload.get("text", "")).strip()
        if e.type is not EventType.ASSISTANT_OUTPUT or not text:
            continue
        found = (
            (text, found[1] + 1, found[2]) if found and found[0] == text else (text, 1, e.sequence)
        )
    if found is not None:
        key = f"{hashlib.sha256(found[0].encode()).hexdigest()[:16]}:{found[2]}"
        if found[1] >= limits.repeated_text_at and ("repeated_text", key) not in issued:
            return ("repeated_text", key)
    by_tool: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for call_id, payload in state.results.items():
        by_tool.setdefault(str(payload.get("name", "")), []).append(
            (state.result_seq.get(call_id, 0), payload)
        )
    for name, results in sorted(by_tool.items()):
        results.sort(key=lambda r: r[0])
        count = 0
        for _seq, payload in reversed(results):
            if payload.get("status") == "ok" or payload.get("synthetic"):
                break
            count += 1
        key = f"{name}:{results[-count][0]}" if count else ""
        if count >= limits.tool_failure_hint_at and ("tool_failures", key) not in issued:
            return ("tool_failures", key)
    return None


def summary(decision: object) -> object:
    if isinstance(decision, BoundPrompt):
        return (decision.bound, decision.key)
    if decision is None:
        return None
    return ("stop", decision.reason.value)  # type: ignore[attr-defined]


# -- generated histories -------------------------------------------------------

call_st = st.tuples(st.sampled_from(["Read", "Bash"]), st.integers(0, 1))
outcome_st = st.tuples(st.sampled_from(["ok", "error", "none", "late"]), st.integers(0, 1))
turn_st = st.tuples(
    st.just("turn"),
    st.sampled_from(["", "same", "other"]),
    st.integers(0, 60),
    st.lists(st.tuples(call_st, outcome_st), max_size=4),
)
item_st = st.one_of(
    turn_st,
    st.tuples(st.just("prompt")),
    st.tuples(st.just("late")),
)


class Builder:
    def __init__(self) -> None:
        self.state = RunState(run_id="r")
        self.late: list[tuple[str, str, str, int]] = []
        self.n = 0

    def add(self, kind: EventType, payload: dict[str, Any], call_id: str | None = None) -> None:
        self.state.apply(
            Event(
                run_id="r",
                sequence=self.state.next_sequence,
                type=kind,
                payload=payload,
                call_id=call_id,
                created_at=NOW,
            )
        )

    def result(self, call_id: str, name: str, status: str, content: int) -> None:
        payload = {"call_id": call_id, "name": name, "status": status, "content": f"out {content}"}
        self.add(EventType.TOOL_RESULT, payload, call_id)

    def item(self, item: tuple[Any, ...]) -> None:
        if item[0] == "prompt":  # commit the prompt the bounds ask for, as the loop would
            decision = check_bounds(self.state, LIMITS)
            if isinstance(decision, BoundPrompt):
                self.add(
                    EventType.CONTROL,
                    {"kind": "bound", "bound": decision.bound, "key": decision.key},
                )
            return
        if item[0] == "late":
            for call_id, name, status, content in self.late:
                self.result(call_id, name, status, content)
            self.late = []
            return
        _, text, tokens, calls = item
        turn = self.state.turns
        ids = [f"c{self.n}_{i}" for i in range(len(calls))]
        self.n += 1
        usage = {"input_tokens": tokens, "output_tokens": 1}
        self.add(
            EventType.ASSISTANT_OUTPUT,
            {"text": text, "turn": turn, "call_ids": ids, "usage": usage},
        )
        for call_id, ((name, arg), _) in zip(ids, calls, strict=True):
            self.add(
                EventType.TOOL_CALL,
                {"call_id": call_id, "name": name, "arguments": {"a": arg}, "turn": turn},
                call_id,
            )
        for call_id, ((name, _), (status, content)) in zip(ids, calls, strict=True):
            if status == "late":
                self.late.append((call_id, name, "ok", content))
            elif status != "none":
                self.result(call_id, name, status, content)


@settings(max_examples=150, deadline=None)
@given(st.lists(item_st, max_size=14))
def test_counters_answer_as_the_full_scans_after_every_commit(items: list[Any]) -> None:
    built = Builder()
    for item in items:
        built.item(item)
        state = built.state
        assert summary(check_bounds(state, LIMITS)) == ref_check(state, LIMITS)
        assert action_streak(state) == ref_streak(state)
        for call_id in state.calls:
            assert action_streak(state, through=call_id) == ref_streak(state, call_id)
        pending = state.pending_calls()
        assert pending == [c for cid, c in state.calls.items() if cid not in state.results]
        if pending:
            want = next(
                (
                    i
                    for i, c in enumerate(pending)
                    if (s := ref_streak(state, c.call_id)) is not None
                    and s.count > LIMITS.action_stop_at
                ),
                len(pending),
            )
            assert calls_within_bound(state, pending, LIMITS) == want
    # a new owner rebuilds the state from the ledger alone: same counters
    rebuilt = RunState.from_ledger("r", built.state.events)
    assert rebuilt.tallies == built.state.tallies
