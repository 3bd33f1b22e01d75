"""Running counters of the loop bounds, folded event by event (DESIGN.md section 6).

:class:`Tallies` lives in :class:`~nahida_workers.core.state.RunState` and is
updated by ``RunState.apply`` as each committed event folds in, so the bound
checks of ``core/bounds.py`` cost what is new in a turn, not the run's whole
history (cost linear in session length).  It holds nothing the ledger does
not: a state rebuilt from the ledger on takeover folds the same events and
gets the same counters.

The action streak is kept as a checkpoint: the fold over the longest prefix
of calls (in provider order) whose results are all committed.  A call's step
depends only on its own and its predecessor's call and result, which never
change once committed, so the checkpoint is final; the unanswered tail (the
calls of the latest turn, normally) is folded on demand by
:func:`nahida_workers.core.bounds.action_streak`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.messages import ToolCall

__all__ = ["FailureRun", "Streak", "StreakFold", "Tallies", "step"]


@dataclass(frozen=True)
class Streak:
    """The trailing run of consecutive calls with one action signature.

    Attributes:
        name / fingerprint: the action (tool + input fingerprint).
        count: calls in the streak.
        first_call_id: the call that started it (identifies the trigger).
    """

    name: str
    fingerprint: str
    count: int
    first_call_id: str


@dataclass(frozen=True)
class StreakFold:
    """The action-streak fold after some calls: the streak and the last call's turn and result."""

    streak: Streak | None = None
    prev_turn: int | None = None
    prev_result: dict[str, object] | None = None


def _output(result: dict[str, object] | None) -> object:
    return None if result is None else result.get("content")


def step(
    fold: StreakFold, call: ToolCall, turn: int, result: dict[str, object] | None
) -> StreakFold:
    """Fold one more call (in provider order) into the action streak.

    A repeat extends the streak unless it shows progress: a successful
    result, in a later turn than the previous call, whose output differs
    from the previous call's (DESIGN.md section 6).
    """
    streak = fold.streak
    same = (
        streak is not None and streak.name == call.name and streak.fingerprint == call.fingerprint
    )
    progress = (
        same
        and result is not None
        and result.get("status") == "ok"
        and fold.prev_turn is not None
        and turn > fold.prev_turn
        and _output(result) != _output(fold.prev_result)
    )
    if same and not progress:
        assert streak is not None
        streak = Streak(streak.name, streak.fingerprint, streak.count + 1, streak.first_call_id)
    else:
        streak = Streak(call.name, call.fingerprint, 1, call.call_id)
    return StreakFold(streak, turn, result)


@dataclass
class FailureRun:
    """One tool's trailing run of failed results, in ledger order.

    Attributes:
        count: consecutive failures (0 after an ok or synthetic result).
        first_seq: sequence of the first failure of the run.
        last: the tool's latest result payload.
    """

    count: int = 0
    first_seq: int = 0
    last: dict[str, Any] = field(default_factory=dict)


#: Raw stop reasons of a reply cut by the output limit (OpenAI ``length``, Anthropic
#: ``max_tokens``): a turn with calls keeps its normalised ``tool_calls`` but was cut too.
TRUNCATED_RAW_STOPS = frozenset({"length", "max_tokens"})


@dataclass
class Tallies:
    """Bound counters of one run, folded from its committed events.

    Attributes:
        tokens: provider-reported input + output tokens of the run's turns.
        issued: ``(bound, key)`` of every bound prompt already committed.
        truncations: truncation recoveries already committed.
        truncated_turns: provider turns cut by the output limit
            (``stop_reason: max_tokens``), with or without calls.
        text: ``(text, count, first sequence)`` of the trailing run of
            identical turn texts (turns without text skipped), or None.
        failures: per tool name, its trailing run of failures.
        order: committed call ids in provider order; ``index`` their positions.
        done: calls folded into ``checkpoint`` (all answered).
        checkpoint: the action-streak fold over ``order[:done]``.
    """

    tokens: int = 0
    issued: set[tuple[str, str]] = field(default_factory=set)
    truncations: int = 0
    truncated_turns: int = 0
    text: tuple[str, int, int] | None = None
    failures: dict[str, FailureRun] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    done: int = 0
    checkpoint: StreakFold = field(default_factory=StreakFold)

    def fold(
        self,
        event: Event,
        calls: dict[str, ToolCall],
        call_turn: dict[str, int],
        results: dict[str, dict[str, object]],
        *,
        call_id: str | None = None,
        result_seq: dict[str, int] | None = None,
        duplicate: bool = False,
    ) -> None:
        """Count one committed event; ``calls``/``call_turn``/``results`` already include it.

        ``call_id``: the id the call was folded under (a ``tool_call``);
        ``duplicate``: a ``tool_result`` for a call that already had one (the
        ledger refuses it; counted as the full scan would, from ``results``
        and ``result_seq``).
        """
        kind = event.type
        if kind is EventType.ASSISTANT_OUTPUT:
            self._turn(event)
        elif kind is EventType.CONTROL:
            what = event.payload.get("kind")
            if what == "bound":
                self.issued.add((str(event.payload.get("bound")), str(event.payload.get("key"))))
            elif what == "truncation":
                self.truncations += 1
        elif kind is EventType.TOOL_CALL and call_id is not None:
            if call_id not in self.index:
                self.index[call_id] = len(self.order)
                self.order.append(call_id)
            self._advance(calls, call_turn, results)
        elif kind is EventType.TOOL_RESULT and event.call_id is not None:
            if duplicate:
                self._refold_failures(results, result_seq or {})
            else:
                self._failure(event.sequence, event.payload)
            position = self.index.get(event.call_id)
            if position is not None and position < self.done:  # a second result: refold
                self.done, self.checkpoint = 0, StreakFold()
            self._advance(calls, call_turn, results)

    def _turn(self, event: Event) -> None:
        if (
            event.payload.get("stop_reason") == "max_tokens"
            or event.payload.get("raw_stop_reason") in TRUNCATED_RAW_STOPS
        ):
            self.truncated_turns += 1
        usage = event.payload.get("usage")
        if isinstance(usage, dict):
            self.tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        text = str(event.payload.get("text", "")).strip()
        if not text:
            return  # a turn with no text neither repeats nor breaks a text
        if self.text is not None and self.text[0] == text:
            self.text = (text, self.text[1] + 1, self.text[2])
        else:
            self.text = (text, 1, event.sequence)

    def _refold_failures(
        self, results: dict[str, dict[str, object]], result_seq: dict[str, int]
    ) -> None:
        self.failures = {}
        for call_id in sorted(results, key=lambda c: result_seq.get(c, 0)):
            self._failure(result_seq.get(call_id, 0), results[call_id])

    def _failure(self, sequence: int, payload: Mapping[str, Any]) -> None:
        run = self.failures.setdefault(str(payload.get("name", "")), FailureRun())
        if payload.get("status") == "ok" or payload.get("synthetic"):
            run.count = 0
        else:
            if run.count == 0:
                run.first_seq = sequence
            run.count += 1
        run.last = dict(payload)

    def _advance(
        self,
        calls: dict[str, ToolCall],
        call_turn: dict[str, int],
        results: dict[str, dict[str, object]],
    ) -> None:
        """Move the checkpoint over every leading call that now has its result."""
        while self.done < len(self.order):
            call_id = self.order[self.done]
            result = results.get(call_id)
            if result is None:
                return
            self.checkpoint = step(
                self.checkpoint, calls[call_id], call_turn.get(call_id, -1), result
            )
            self.done += 1
