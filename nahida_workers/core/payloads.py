"""Payload shapes of each event type, built and read in one place.

================  ===========================================================
event type        payload keys
================  ===========================================================
user_input        text, source (prompt | steering | correction | repair | inbox | bound),
                  message_id; a prompt stored as an artifact adds ``artifact``
                  {sha256, size, chars, head, tail} and ``text`` is its excerpt
assistant_output  text, turn, stop_reason, raw_stop_reason, usage, model, call_ids;
                  optional refusal (text), content_blocks (a paused turn's blocks)
tool_call         call_id, name, arguments, arguments_error, raw_arguments, turn, index
tool_result       call_id, name, status, content, is_error, synthetic, evidence_kind;
                  optional reason (why a call was not run, e.g. doom_loop)
provider_anomaly  code, detail, turn
control           kind, plus kind-specific keys; child sessions (section 8):
                  ``parked`` {awaiting: [child ids], calls: [Task call ids]}
terminal          state, reason, failure_code, final_text
================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall

__all__ = [
    "ABORTED_TEXT",
    "INTERRUPTED_TEXT",
    "call_from_payload",
    "call_payload",
    "result_content",
    "result_payload",
    "shown_arguments",
    "shown_text",
    "user_text",
]

#: Content of a synthetic result for a call that lost its worker (case B06).
INTERRUPTED_TEXT = "interrupted: the worker was lost before a result was recorded"
#: Content of a result that arrived for an older executor epoch (DESIGN.md section 5).
ABORTED_TEXT = "aborted: the call was cancelled before its result could be used"


def call_payload(call: ToolCall, *, turn: int, index: int) -> dict[str, Any]:
    """Payload of a ``tool_call`` event."""
    return {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "arguments_error": call.arguments_error,
        "raw_arguments": call.raw_arguments,
        "turn": turn,
        "index": index,
    }


def call_from_payload(payload: Mapping[str, Any]) -> ToolCall:
    """Rebuild the :class:`ToolCall` of a ``tool_call`` payload."""
    arguments = payload.get("arguments")
    return ToolCall(
        call_id=str(payload["call_id"]),
        name=str(payload["name"]),
        arguments=arguments if isinstance(arguments, dict) else {},
        arguments_error=payload.get("arguments_error"),
        raw_arguments=payload.get("raw_arguments")
        if isinstance(payload.get("raw_arguments"), str)
        else None,
    )


def result_payload(
    *,
    call_id: str,
    name: str,
    status: ToolStatus,
    content: str,
    synthetic: bool = False,
    evidence_kind: str = "none",
) -> dict[str, Any]:
    """Payload of a ``tool_result`` event; ``is_error`` iff status is not ok."""
    return {
        "call_id": call_id,
        "name": name,
        "status": status.value,
        "content": content,
        "is_error": status is not ToolStatus.OK,
        "synthetic": synthetic,
        "evidence_kind": evidence_kind,
    }


def _is_capped(value: Any) -> bool:
    return isinstance(value, dict) and bool(value.get("capped"))


def shown_text(value: Any) -> str:
    """The text a stored string shows the model.

    A string the ledger's size cap replaced (``{capped, head, tail, sha256,
    size}``, ``ledger/rules.py``) is shown as head and tail with a note of what
    was omitted, never as the cap's storage record.
    """
    if _is_capped(value):
        return (
            f"{value.get('head', '')}\n... [{value.get('size')} bytes, sha256 "
            f"{value.get('sha256')}; middle omitted] ...\n{value.get('tail', '')}"
        )
    return str(value)


def shown_arguments(value: Any) -> Any:
    """Stored call arguments as the model is shown them: every capped string as text."""
    if _is_capped(value):
        return shown_text(value)
    if isinstance(value, dict):
        return {k: shown_arguments(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown_arguments(v) for v in value]
    return value


def user_text(payload: Mapping[str, Any]) -> str:
    """The text a stored user input shows the model.

    Large input is stored as a prompt artifact and its event holds a readable
    excerpt (``runtime/artifacts.py``); a text the ledger's size cap replaced
    anyway is shown as head and tail, never as the cap's storage record.
    """
    return shown_text(payload.get("text", ""))


def result_content(payload: Mapping[str, Any]) -> str:
    """The text a stored result shows the model (a capped payload shows head+tail)."""
    return shown_text(payload.get("content", ""))
