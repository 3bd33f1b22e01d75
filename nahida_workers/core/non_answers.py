"""Provider turns that are not answers, judged before the completion pipeline (DESIGN.md section 6).

A turn with no tool call is a candidate answer (DESIGN.md section 6) only if
it is one.  Before the pipeline looks at it, :func:`judge_non_answer` sorts
out the turns that are something else:

* a refusal (OpenAI ``refusal`` content, Anthropic ``stop_reason:
  "refusal"``) ends the run ``incomplete/refused``; a reply the provider's
  content filter stopped ends it ``incomplete/content_filtered``.  The model
  declined: nothing it wrote is an answer, and the runtime writes the final
  text;
* a turn with no parsable call whose finish reason claims tool calls
  (``finish_reason: tool_calls``, ``stop_reason: tool_use``) is a protocol
  anomaly (DESIGN.md section 7, case B09), with or without text: the text
  is not a candidate answer (docs/concepts/context.md).  One repair turn, then
  ``failed/provider_protocol_invalid``;
* so is a turn whose only calls had no name or no id (the adapters drop them
  and record a ``malformed_tool_call`` anomaly, ``providers/classify.py``),
  with or without text: the model meant to call a tool, so its text is not
  an answer.  One repair turn per run covers both anomalies;
* an empty answer (no text, no call) is never ``completed``, whatever the
  contract: one correction turn, then ``incomplete/empty_answer``.

An Anthropic ``pause_turn`` is not judged at all: the loop sends the paused
content back and the model continues the same turn (``core/loop.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nahida_workers.core.events import (
    Event,
    EventType,
    FailureCode,
    ReasonCode,
    TerminalState,
)
from nahida_workers.core.messages import StopReason
from nahida_workers.core.state import RunState

__all__ = [
    "EMPTY_ANSWER_STAGE",
    "OWN_FINAL_TEXT",
    "REPAIR_ANOMALIES",
    "GiveUp",
    "Repair",
    "claims_calls_it_did_not_send",
    "judge_non_answer",
    "sent_only_malformed_calls",
]

#: Correction stage name of the empty-answer check (counted like the pipeline's stages).
EMPTY_ANSWER_STAGE = "empty_answer"
#: ``control.kind`` of a repair turn after a provider protocol anomaly.
REPAIR_KIND = "repair"
#: Anomaly code of a finish reason that claims calls while none was parsed (case B09).
MISMATCH = "finish_reason_mismatch"
#: Anomaly code of calls the adapter dropped for having no name or no id.
MALFORMED_CALL = "malformed_tool_call"
#: Repair anomalies: a tool finish with no parsed call, with no text or with text.
EMPTY_TOOL_TURN = "empty_tool_turn"
TEXT_TOOL_TURN = "text_tool_turn"
#: Every repair anomaly: one repair turn per run covers them all.
REPAIR_ANOMALIES = (EMPTY_TOOL_TURN, TEXT_TOOL_TURN, MALFORMED_CALL)

#: Final texts of reasons that say more than "not finished": the model declined.
OWN_FINAL_TEXT = {
    ReasonCode.REFUSED: "The model declined the request (refused); the work was not done.",
    ReasonCode.CONTENT_FILTERED: (
        "The provider's content filter stopped the reply (content filtered); the work was not done."
    ),
    ReasonCode.NO_TOOL_CALLING: (
        "The work is not verified (no tool calling): the completion contract needs evidence "
        "from tool calls, but this session's provider cannot call tools, so nothing the "
        "answer says could be checked."
    ),
}

_EMPTY_TOOL_TURN_TEXT = (
    "Your last reply ended with a tool-call finish reason, but it held no text and no "
    "tool call that could be parsed. Reply again: call a tool with a JSON object as "
    "arguments, or answer in text."
)
_TEXT_TOOL_TURN_TEXT = (
    "Your last reply ended with a tool-call finish reason, but no tool call in it could be "
    "parsed, so your text was not taken as an answer. Reply again: call a tool by one of "
    "its names with a JSON object as arguments, or give your final answer in text."
)
_MALFORMED_CALL_TEXT = (
    "Your last reply held a tool call with no tool name (or no call id), so it could not "
    "be run. Reply again: call a tool by one of its names with a JSON object as "
    "arguments, or answer in text."
)
_EMPTY_ANSWER_TEXT = (
    "Your reply was empty. Answer the task in text, or call a tool if there is work left."
)


@dataclass(frozen=True)
class GiveUp:
    """End the run: the turn is final and it is not an answer."""

    state: TerminalState
    reason: ReasonCode
    failure_code: FailureCode | None = None


@dataclass(frozen=True)
class Repair:
    """One more provider turn after a control event and a user message.

    Attributes:
        control: payload of the ``control`` event that records why.
        text: the user message the model gets.
    """

    control: dict[str, Any]
    text: str


def _turn_anomalies(state: RunState, turn: Event, code: str) -> list[dict[str, Any]]:
    """The ``detail`` of every ``provider_anomaly`` ``code`` recorded with ``turn``."""
    index = turn.payload.get("turn")
    return [
        e.payload.get("detail") or {}
        for e in state.events
        if e.type is EventType.PROVIDER_ANOMALY
        and e.sequence > turn.sequence
        and e.payload.get("turn") == index
        and e.payload.get("code") == code
    ]


def claims_calls_it_did_not_send(state: RunState, turn: Event) -> bool:
    """The turn's finish reason says tool calls, and no call was parsed."""
    if turn.payload.get("call_ids"):
        return False
    if turn.payload.get("stop_reason") == StopReason.TOOL_CALLS.value:
        return True
    return any(d.get("parsed_tool_calls") == 0 for d in _turn_anomalies(state, turn, MISMATCH))


def sent_only_malformed_calls(state: RunState, turn: Event) -> bool:
    """The turn's calls were all dropped for having no name or no id (none is left)."""
    if turn.payload.get("call_ids"):
        return False
    return bool(_turn_anomalies(state, turn, MALFORMED_CALL))


def _done(state: RunState, kind: str, key: str, value: str) -> int:
    return sum(
        1
        for e in state.events
        if e.type is EventType.CONTROL
        and e.payload.get("kind") == kind
        and e.payload.get(key) == value
    )


def _repair_once(state: RunState, turn: Event, anomaly: str, text: str) -> GiveUp | Repair:
    """One protocol repair turn per run (either anomaly), then ``provider_protocol_invalid``."""
    if sum(_done(state, REPAIR_KIND, "anomaly", a) for a in REPAIR_ANOMALIES):
        return GiveUp(
            TerminalState.FAILED,
            ReasonCode.PROVIDER_PROTOCOL_INVALID,
            FailureCode.PROVIDER_PROTOCOL_INVALID,
        )
    return Repair({"kind": REPAIR_KIND, "anomaly": anomaly, "turn": turn.payload.get("turn")}, text)


def judge_non_answer(
    state: RunState, turn: Event, *, pending_steering: int = 0
) -> GiveUp | Repair | None:
    """What to do with a no-call turn that is not an answer; None for a candidate.

    Args:
        state: the run so far.
        turn: its latest ``assistant_output`` (no tool calls).
        pending_steering: steering messages waiting; an empty reply then lets
            the pipeline continue with them instead of a correction.
    """
    stop = turn.payload.get("stop_reason")
    if stop == StopReason.REFUSAL.value or turn.payload.get("refusal"):
        return GiveUp(TerminalState.INCOMPLETE, ReasonCode.REFUSED)
    if stop == StopReason.CONTENT_FILTER.value:
        return GiveUp(TerminalState.INCOMPLETE, ReasonCode.CONTENT_FILTERED)
    if sent_only_malformed_calls(state, turn):
        return _repair_once(state, turn, MALFORMED_CALL, _MALFORMED_CALL_TEXT)
    has_text = bool(str(turn.payload.get("text", "")).strip())
    if claims_calls_it_did_not_send(state, turn):
        # The model meant to call a tool: its text, if any, is not an answer.
        if has_text:
            return _repair_once(state, turn, TEXT_TOOL_TURN, _TEXT_TOOL_TURN_TEXT)
        return _repair_once(state, turn, EMPTY_TOOL_TURN, _EMPTY_TOOL_TURN_TEXT)
    if has_text:
        return None
    if pending_steering > 0:
        return None  # the pipeline's first stage continues with the steering
    if _done(state, "correction", "stage", EMPTY_ANSWER_STAGE) >= 1:
        return GiveUp(TerminalState.INCOMPLETE, ReasonCode.EMPTY_ANSWER)
    return Repair({"kind": "correction", "stage": EMPTY_ANSWER_STAGE}, _EMPTY_ANSWER_TEXT)
