"""Admitting a model's tool call before its turn is committed (DESIGN.md section 2).

DESIGN.md section 3 step 3 commits every ``tool_call`` before any tool
starts; what is committed must be storable on every backend and must be what
runs.  A call whose arguments hold a NUL or a lone surrogate is committed with
cleaned arguments and an ``arguments_error``: it is never executed (a side
effect without a storable record of its input would have no receipt) and the
model gets an error result it can correct.  An over-long call id or tool name
is bounded (``core/values.py``), the original kept in the ``tool_call``
payload.  Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.messages import ToolCall
from nahida_workers.core.values import bounded_id, clean_json, clean_text, is_clean

__all__ = ["UNSTORABLE_ARGUMENTS", "admit_call"]

#: The ``arguments_error`` of a call whose arguments cannot be stored as given.
UNSTORABLE_ARGUMENTS = (
    "the arguments contain a NUL character (U+0000) or an unpaired surrogate "
    "(U+D800-U+DFFF), which cannot be stored or passed on; the call was not run. "
    "Send the text without them"
)


def admit_call(call: ToolCall) -> tuple[ToolCall, dict[str, Any]]:
    """A call as it may be committed, and the payload keys that keep what was changed.

    Returns:
        ``(call, extra)``: ``call`` with a bounded id and name and, when its
        arguments could not be stored as given, cleaned arguments and an
        ``arguments_error`` (it is then never executed); ``extra`` holds
        ``original_call_id`` / ``original_name`` (cleaned, for the record)
        when those were bounded.
    """
    update: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    call_id = bounded_id(call.call_id)
    if call_id != call.call_id:
        update["call_id"] = call_id
        extra["original_call_id"] = clean_text(call.call_id)
    name = bounded_id(call.name)
    if name != call.name:
        update["name"] = name
        extra["original_name"] = clean_text(call.name)
    arguments = clean_json(call.arguments)
    raw = call.raw_arguments
    if arguments is not call.arguments or (raw is not None and not is_clean(raw)):
        update["arguments"] = arguments
        update["raw_arguments"] = None if raw is None else clean_text(raw)
        if call.arguments_error is None:
            update["arguments_error"] = UNSTORABLE_ARGUMENTS
    if not update:
        return call, extra
    return call.model_copy(update=update), extra
