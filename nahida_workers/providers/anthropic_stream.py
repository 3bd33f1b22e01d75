"""Anthropic Messages stream parser; pure, no I/O.

Feed it the decoded SSE events of one ``stream: true`` response, then call
:meth:`AnthropicStreamParser.finish`.  A plain JSON ``message`` body (a proxy
that ignored ``stream``) goes through :func:`parse_anthropic_message`.

Wire rules (Anthropic "Streaming Messages" doc and recordings W07-W11):

* content blocks are accumulated per ``index``; ``text`` joins every ``text``
  block in index order with no separator; ``thinking`` blocks are not text;
* tool calls are the client ``tool_use`` blocks only -- ``server_tool_use``
  and its result blocks ran on Anthropic's side and are never calls (W10);
* ``input_json_delta`` fragments are joined per block; an empty join means
  the block's start ``input`` (``{}`` in W09);
* usage is ``message_start``'s usage updated by every non-null field of
  ``message_delta``'s usage (W10: ``input_tokens`` changes there);
* ``message_stop`` is the terminal marker; ``ping`` and unknown event types
  are ignored (the doc asks clients to tolerate new ones);
* ``event: error`` mid-stream raises the typed error (``overloaded_error`` ->
  retryable, ``provider_unavailable``).
* ``stop_reason: "refusal"`` is the model declining (``REFUSAL``, never an
  answer); ``"pause_turn"`` (a server-tool loop paused) is ``PAUSE_TURN`` and
  the turn keeps its content blocks as the API sent them (text, thinking with
  its signature, server tool use and results, tool use), so the runtime can
  send them back as-is to let the model continue the same turn.

Early reporting (``on_tool_call``, DESIGN.md section 3 "Streaming pre-start"):
a ``tool_use`` block is complete at its ``content_block_stop``; it is reported
then, if its arguments parsed into a JSON object, and never again.  Reports
keep index order: a block that stops while a lower-indexed ``tool_use`` block
is still open waits for it (the API streams blocks one after another, so this
never delays a real stream).  At the end of a body that had ``message_stop``
any block never stopped is reported too; a body cut off before it reports
nothing more (:meth:`AnthropicStreamParser.finish` raises).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nahida_workers.core.messages import ProviderTurn, StopReason, ToolCall, Usage
from nahida_workers.providers.classify import (
    build_turn,
    malformed_event,
    tool_call_from_raw,
    wire_string,
)
from nahida_workers.providers.early_calls import ToolCallSink, emit_parsed
from nahida_workers.providers.http_errors import error_from_payload
from nahida_workers.providers.sse import SSEEvent

__all__ = ["AnthropicStreamParser", "anthropic_usage", "parse_anthropic_message"]

_STOP_MAP = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.END_TURN,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
}
_TOOL_STOPS = frozenset({"tool_use"})


class _Block:
    __slots__ = (
        "block_id",
        "extra",
        "initial_input",
        "kind",
        "name",
        "parts",
        "raw",
        "reported",
        "stopped",
    )

    def __init__(self, kind: str, block: dict[str, Any]) -> None:
        self.kind = kind
        self.raw = block  # the block's start, as sent (kept for a paused turn)
        self.block_id = wire_string(block.get("id"))  # not a string: no id (a malformed call)
        self.name = wire_string(block.get("name"))
        initial = block.get("input")
        self.initial_input = initial if isinstance(initial, dict) else None
        self.parts: list[str] = []
        self.extra: dict[str, Any] = {}  # thinking text, signature, citations of the block
        self.stopped = False  # content_block_stop seen (tracked only for on_tool_call)
        self.reported = False  # offered to on_tool_call

    def content(self) -> dict[str, Any]:
        """The block as the API would send it in a non-streaming body."""
        out = dict(self.raw)
        if self.kind == "text":
            out["text"] = "".join(self.parts)
        elif self.kind in ("tool_use", "server_tool_use"):
            call = self.tool_call()
            out["input"] = call.arguments
        for key, value in self.extra.items():
            out[key] = "".join(value) if isinstance(value, list) and key != "citations" else value
        return out

    def tool_call(self) -> ToolCall:
        raw = "".join(self.parts)
        if not raw.strip() and self.initial_input:
            raw = json.dumps(self.initial_input)
        return tool_call_from_raw(self.block_id, self.name, raw)


def anthropic_usage(usage: dict[str, Any]) -> Usage:
    """Map a Messages ``usage`` object to :class:`Usage`.

    ``input_tokens`` (excludes cache reads), ``output_tokens``,
    ``cache_read_input_tokens`` -> cache read, ``cache_creation_input_tokens``
    -> cache write.  Missing or null fields count as 0.
    """
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
    )


class AnthropicStreamParser:
    """Accumulates Messages stream events into one :class:`ProviderTurn`.

    Args:
        provider: adapter name used in error messages.
        on_tool_call: receives each client ``tool_use`` call once, in index
            order, at its ``content_block_stop`` if its arguments parsed into
            a JSON object (rules in the module docstring); its exceptions
            propagate out of :meth:`feed` / :meth:`finish`.
    """

    __slots__ = ("_blocks", "_done", "_model", "_on_tool_call", "_provider", "_stop", "_usage")

    def __init__(
        self, *, provider: str = "anthropic", on_tool_call: ToolCallSink | None = None
    ) -> None:
        self._provider = provider
        self._on_tool_call = on_tool_call
        self._blocks: dict[int, _Block] = {}
        self._stop: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model: str | None = None
        self._done = False

    def feed(self, event: SSEEvent) -> str:
        """Consume one SSE event; return its text delta ("" when none).

        Raises:
            ProviderProtocolError: ``data`` is not a JSON object (retryable).
            ProviderAPIError: an ``error`` event.
        """
        try:
            data = json.loads(event.data)
        except ValueError:
            raise malformed_event(self._provider) from None
        if not isinstance(data, dict):
            raise malformed_event(self._provider)
        return self.feed_data(data, event.event)

    def feed_data(self, data: dict[str, Any], event_name: str = "message") -> str:
        """Consume one parsed event object; return its text delta.

        Unknown event types (and ``ping``) are ignored, as the wire rules ask.
        """
        kind = data.get("type") or event_name
        handler = _HANDLERS.get(str(kind))
        return "" if handler is None else handler(self, data)

    def _on_block_start(self, data: dict[str, Any]) -> str:
        block = data.get("content_block")
        block = block if isinstance(block, dict) else {}
        started = _Block(str(block.get("type") or ""), block)
        self._blocks[_index(data)] = started
        text = block.get("text")
        if started.kind == "text" and isinstance(text, str) and text:
            started.parts.append(text)
            return text
        return ""

    def _on_message_start(self, data: dict[str, Any]) -> str:
        message = data.get("message")
        message = message if isinstance(message, dict) else {}
        if isinstance(message.get("model"), str):
            self._model = message["model"]
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage = dict(usage)
        return ""

    def _on_message_delta(self, data: dict[str, Any]) -> str:
        delta = data.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self._stop = delta["stop_reason"]
        usage = data.get("usage")
        if isinstance(usage, dict):
            merged = self._usage if self._usage is not None else {}
            merged.update({k: v for k, v in usage.items() if v is not None})
            self._usage = merged
        return ""

    def _on_block_stop(self, data: dict[str, Any]) -> str:
        if self._on_tool_call is not None:
            block = self._blocks.get(_index(data))
            if block is not None and block.kind == "tool_use":
                block.stopped = True
                self._report(stopped_only=True)
        return ""

    def _on_message_stop(self, data: dict[str, Any]) -> str:
        self._done = True
        return ""

    def _on_error(self, data: dict[str, Any]) -> str:
        error = data.get("error")
        raise error_from_payload(error if isinstance(error, dict) else {}, provider=self._provider)

    def mark_done(self) -> None:
        """Record that the response is complete (a non-stream body has no message_stop)."""
        self._done = True

    def finish(self) -> ProviderTurn:
        """Build the turn once the body has ended.

        Raises:
            ProviderProtocolError: no ``message_stop`` while a ``tool_use`` block
                was in progress (retryable).
        """
        if self._done and self._on_tool_call is not None:
            self._report(stopped_only=False)
        text: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind == "text":
                text.extend(block.parts)
            elif block.kind == "tool_use":
                calls.append(block.tool_call())
        return build_turn(
            api=self._provider,
            text="".join(text),
            calls=calls,
            raw_stop=self._stop,
            stop_map=_STOP_MAP,
            tool_stops=_TOOL_STOPS,
            usage=anthropic_usage(self._usage) if self._usage is not None else None,
            model=self._model,
            terminal=self._done,
            content_blocks=[self._blocks[i].content() for i in sorted(self._blocks)]
            if self._stop == "pause_turn"
            else (),
        )

    def _report(self, *, stopped_only: bool) -> None:
        """Offer ``tool_use`` blocks to ``on_tool_call`` in index order, each once.

        With ``stopped_only``, stop at the first unreported block still open.
        """
        sink = self._on_tool_call
        assert sink is not None
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind != "tool_use" or block.reported:
                continue
            if stopped_only and not block.stopped:
                return
            block.reported = True  # before the callback: a raising callback never sees it twice
            emit_parsed(sink, block.tool_call())

    def _delta(self, data: dict[str, Any]) -> str:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return ""
        index = _index(data)
        kind = delta.get("type")
        if kind == "text_delta":
            block = self._blocks.get(index)
            if block is None:  # no content_block_start seen: it can only be text
                block = self._blocks[index] = _Block("text", {})
            text = delta.get("text")
            if block.kind == "text" and isinstance(text, str) and text:
                block.parts.append(text)
                return text
        elif kind == "input_json_delta":
            block = self._blocks.get(index)
            partial = delta.get("partial_json")
            if block is not None and isinstance(partial, str) and partial:
                block.parts.append(partial)
        elif kind in ("thinking_delta", "signature_delta", "citations_delta"):
            # Not text, not calls: kept only so a paused turn goes back whole.
            block = self._blocks.get(index)
            if block is not None:
                key = {"thinking_delta": "thinking", "signature_delta": "signature"}.get(
                    str(kind), "citations"
                )
                value = delta.get("citation") if key == "citations" else delta.get(key)
                if value is not None:
                    block.extra.setdefault(key, []).append(value)
        return ""


#: One handler per Messages stream event type; others are ignored.
_HANDLERS: dict[str, Callable[[AnthropicStreamParser, dict[str, Any]], str]] = {
    "content_block_delta": AnthropicStreamParser._delta,
    "content_block_start": AnthropicStreamParser._on_block_start,
    "message_start": AnthropicStreamParser._on_message_start,
    "message_delta": AnthropicStreamParser._on_message_delta,
    "content_block_stop": AnthropicStreamParser._on_block_stop,
    "message_stop": AnthropicStreamParser._on_message_stop,
    "error": AnthropicStreamParser._on_error,
}


def _index(data: dict[str, Any]) -> int:
    index = data.get("index")
    return index if isinstance(index, int) else 0


def parse_anthropic_message(
    body: dict[str, Any], *, provider: str = "anthropic", on_tool_call: ToolCallSink | None = None
) -> ProviderTurn:
    """Parse a non-streaming Messages response body with the stream rules.

    Every parsed call is reported to ``on_tool_call``, in order, once the body
    is parsed.

    Raises:
        ProviderAPIError: the body is an ``error`` object.
    """
    parser = AnthropicStreamParser(provider=provider)
    if body.get("type") == "error":
        parser.feed_data(body)
    parser.feed_data({"type": "message_start", "message": body})
    content = body.get("content")
    for index, block in enumerate(content if isinstance(content, list) else ()):
        parser.feed_data({"type": "content_block_start", "index": index, "content_block": block})
    parser.feed_data({"type": "message_delta", "delta": {"stop_reason": body.get("stop_reason")}})
    parser.mark_done()
    turn = parser.finish()
    if on_tool_call is not None:
        for call in turn.tool_calls:
            emit_parsed(on_tool_call, call)
    return turn
