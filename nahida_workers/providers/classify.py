"""Rules both stream parsers share: argument parsing and turn classification.

Pure (no I/O).  The rules:

* Arguments: an empty (or all-whitespace) string counts as ``{}``; text that
  is not JSON, or JSON that is not an object, gives a :class:`ToolCall` with
  ``arguments_error`` and ``raw_arguments`` set and ``arguments == {}`` -- the
  runtime answers it with a tool error the model can correct; never raised.
* A call with no name (empty, all whitespace, or not a string on the wire)
  or no id is not a parsable call (DESIGN.md section 7): it cannot run, and an
  error result would answer nothing the model can name.  It is dropped and an
  ``Anomaly("malformed_tool_call", {"dropped": n, "calls": [...]})`` is
  attached; a turn left with no call is then judged like any turn without
  one (``core/non_answers.py``: one repair turn, then
  ``failed/provider_protocol_invalid``).  A call to a tool the job does not
  offer *is* a call: the runtime answers it with an error the model can fix.
* Classification (case B09): ``stop_reason`` is ``TOOL_CALLS`` iff tool calls
  were parsed; otherwise ``REFUSAL`` when the model sent refusal content
  (OpenAI ``refusal``), else the API's reason, normalised.  When the API's reason
  disagrees with what was parsed an ``Anomaly("finish_reason_mismatch",
  {"finish_reason": raw, "parsed_tool_calls": n})`` is attached.
* Truncation: a stream that ended before its terminal marker (``[DONE]`` or
  a finish reason; Anthropic's ``message_stop``) raises a retryable
  :class:`ProviderProtocolError` marked ``truncated``, retried like a broken
  connection: a call in progress must never run, and text that simply stops
  is no answer -- kept, it ended runs ``completed`` with half a sentence
  (DESIGN.md section 6: a run says "completed" only with the evidence).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import Anomaly, ProviderTurn, StopReason, ToolCall, Usage
from nahida_workers.core.non_answers import MALFORMED_CALL
from nahida_workers.errors import ProviderProtocolError

__all__ = ["build_turn", "call_defect", "malformed_event", "tool_call_from_raw", "wire_string"]


def wire_string(value: Any) -> str:
    """A wire field that must be a string (a call's id or name): itself, else ``""``."""
    return value if isinstance(value, str) else ""


def call_defect(call: ToolCall) -> str | None:
    """Why ``call`` is not a parsable call at all (rules above), or None when it is."""
    if not call.name.strip():
        return "no tool name"
    if not call.call_id:
        return "no call id"
    return None


def tool_call_from_raw(call_id: str, name: str, raw: str) -> ToolCall:
    """Parse the joined argument fragments of one call (rules above)."""
    if not raw.strip():
        return ToolCall(call_id=call_id, name=name)
    try:
        parsed: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall(
            call_id=call_id,
            name=name,
            arguments_error=f"arguments are not valid JSON: {exc.msg} at position {exc.pos}",
            raw_arguments=raw,
        )
    if not isinstance(parsed, dict):
        return ToolCall(
            call_id=call_id,
            name=name,
            arguments_error=f"arguments are not a JSON object (got {type(parsed).__name__})",
            raw_arguments=raw,
        )
    return ToolCall(call_id=call_id, name=name, arguments=parsed)


def malformed_event(api: str) -> ProviderProtocolError:
    """The error for an event whose ``data`` is not a JSON object (retryable)."""
    return ProviderProtocolError(
        f"{api}: malformed JSON in a stream event (the stream may have been cut off)",
        retryable=True,
        failure_code=FailureCode.PROVIDER_PROTOCOL_INVALID,
    )


def build_turn(
    *,
    api: str,
    text: str,
    calls: Iterable[ToolCall],
    raw_stop: str | None,
    stop_map: Mapping[str, StopReason],
    tool_stops: Collection[str],
    usage: Usage | None,
    model: str | None,
    terminal: bool,
    refusal: str | None = None,
    content_blocks: Iterable[Mapping[str, Any]] = (),
) -> ProviderTurn:
    """Assemble and classify a :class:`ProviderTurn`.

    Args:
        api: adapter name for error messages.
        text: the joined text.
        calls: parsed client tool calls in provider order.
        raw_stop: ``finish_reason`` / ``stop_reason`` as sent (``None`` if never sent).
        stop_map: raw reason -> normalised reason for turns without calls;
            unknown reasons map to ``OTHER``.
        tool_stops: raw reasons that claim tool calls (``tool_calls``, ``tool_use``).
        usage: the final usage or ``None``.
        model: the model the provider reported.
        terminal: whether the terminal marker arrived.
        refusal: refusal text the model sent instead of an answer, if any.
        content_blocks: the API's raw content blocks; kept on the turn only
            when it paused (``pause_turn``) and must be sent back as-is.

    Raises:
        ProviderProtocolError: truncated stream with tool calls in progress
            (retryable, ``provider_protocol_invalid``).
    """
    received = tuple(calls)
    anomalies = _truncation_anomalies(api, received, terminal=terminal)
    tool_calls = _drop_malformed(received, anomalies)
    refused = refusal if refusal and refusal.strip() else None
    stop = _stop_reason(tool_calls, refused, raw_stop, stop_map, terminal=terminal)
    if raw_stop is not None and bool(tool_calls) != (raw_stop in tool_stops):
        anomalies.append(
            Anomaly(
                code="finish_reason_mismatch",
                detail={"finish_reason": raw_stop, "parsed_tool_calls": len(tool_calls)},
            )
        )
    return ProviderTurn(
        text=text,
        tool_calls=tool_calls,
        stop_reason=stop,
        raw_stop_reason=raw_stop,
        usage=usage,
        model=model,
        anomalies=tuple(anomalies),
        refusal=refused,
        content_blocks=tuple(dict(b) for b in content_blocks)
        if stop is StopReason.PAUSE_TURN
        else (),
    )


def _drop_malformed(
    received: tuple[ToolCall, ...], anomalies: list[Anomaly]
) -> tuple[ToolCall, ...]:
    """The parsable calls; one anomaly appended for those with no name or no id (ids bounded)."""
    dropped = [
        {"call_id": c.call_id[:100], "name": c.name[:100], "problem": problem}
        for c in received
        if (problem := call_defect(c)) is not None
    ]
    if dropped:
        detail = {"dropped": len(dropped), "calls": dropped[:16]}
        anomalies.append(Anomaly(code=MALFORMED_CALL, detail=detail))
    return tuple(c for c in received if call_defect(c) is None)


def _truncation_anomalies(
    api: str, tool_calls: tuple[ToolCall, ...], *, terminal: bool
) -> list[Anomaly]:
    """A stream cut off before its end marker: an anomaly, or an error with calls in flight."""
    if not terminal:
        what = (
            f"{len(tool_calls)} tool call(s) were incomplete; none will run"
            if tool_calls
            else "its text is half an answer at best; it is not used"
        )
        raise ProviderProtocolError(
            f"{api}: the stream was cut off before its end marker; {what}",
            retryable=True,
            failure_code=FailureCode.PROVIDER_PROTOCOL_INVALID,
            truncated=True,
        )
    return []


def _stop_reason(
    tool_calls: tuple[ToolCall, ...],
    refused: str | None,
    raw_stop: str | None,
    stop_map: Mapping[str, StopReason],
    *,
    terminal: bool,
) -> StopReason:
    """The normalised stop reason: calls win, then a refusal, then the mapped raw reason."""
    if tool_calls:
        stop = StopReason.TOOL_CALLS
    elif refused is not None:
        stop = StopReason.REFUSAL
    elif raw_stop is None:
        stop = StopReason.OTHER if not terminal else StopReason.END_TURN
    else:
        stop = stop_map.get(raw_stop, StopReason.OTHER)
    return stop
