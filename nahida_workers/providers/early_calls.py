"""Reporting tool calls the moment their arguments are complete (streaming pre-start).

DESIGN.md section 3, "Streaming pre-start": while the stream is still open, a
call whose arguments are complete may be started early by the runtime if its
tool is read-only and concurrency-safe.  The provider side is an
``on_tool_call`` callback (:class:`~nahida_workers.ports.Provider`); this module
holds the two pieces every adapter shares:

* :func:`emit_parsed` -- the one gate: only a call whose arguments parsed into
  a JSON object, with a name and an id, is reported (a call with
  ``arguments_error`` never runs and a nameless one is dropped from the turn,
  so neither is ever pre-started);
* :class:`DedupSink` -- one per ``complete()`` call, in front of the caller's
  callback: a retried attempt that reports the very same call again (same id,
  name and arguments) is suppressed; a call that differs in anything is
  reported again, and the runtime, which keys pre-starts by id and input
  fingerprint, aborts the mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from nahida_workers.core.messages import ToolCall
from nahida_workers.providers.classify import call_defect

__all__ = ["DedupSink", "ToolCallSink", "emit_parsed"]

ToolCallSink = Callable[[ToolCall], None]
"""The ``on_tool_call`` callback: receives one complete, parsed client tool call."""


def emit_parsed(sink: ToolCallSink, call: ToolCall) -> None:
    """Report ``call`` to ``sink`` iff its arguments parsed into a JSON object.

    A call with no name or no id (:func:`~nahida_workers.providers.classify.call_defect`)
    is never reported either.  Exceptions raised by ``sink`` propagate unchanged.
    """
    if call.arguments_error is None and call_defect(call) is None:
        sink(call)


def _fingerprint(call: ToolCall) -> tuple[str, str, str]:
    # Canonical JSON, so key order does not matter but 1, 1.0 and true differ
    # (plain dict equality would call them equal).
    arguments = json.dumps(
        call.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return call.call_id, call.name, arguments


class DedupSink:
    """Forwards each distinct call once per ``complete()`` call (retries included).

    Args:
        sink: the caller's ``on_tool_call``; its exceptions propagate.
    """

    __slots__ = ("_seen", "_sink")

    def __init__(self, sink: ToolCallSink) -> None:
        self._sink = sink
        self._seen: set[tuple[str, str, str]] = set()

    def __call__(self, call: ToolCall) -> None:
        """Forward ``call`` unless an identical one was already forwarded."""
        key = _fingerprint(call)
        if key not in self._seen:
            self._sink(call)
            self._seen.add(key)  # only once delivered: a raising sink saw nothing
