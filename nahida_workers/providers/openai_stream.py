"""Chat Completions stream parser (OpenAI and compatible servers); pure, no I/O.

Feed it the decoded SSE events of one ``stream: true`` response, then call
:meth:`OpenAIStreamParser.finish` for the :class:`ProviderTurn`.  A body that
came back as plain ``application/json`` (a server that ignored ``stream``) goes
through :func:`parse_openai_completion`, which reuses the same accumulator.

Wire rules (OpenAI "Chat Completions streaming" reference and real recordings):

* ``data: [DONE]`` ends the stream; a non-null ``finish_reason`` is also a
  terminal marker (some compatible servers omit ``[DONE]``).
* ``usage`` is the last non-null ``usage`` seen (W04: a later chunk with
  ``usage: null`` must not erase it); the usage chunk has ``choices: []``.
* Tool-call fragments (case B08): a fragment that carries a non-empty ``id``
  different from the id held at its ``index`` starts a new call; a fragment
  with no ``index`` belongs to the current slot (the last index touched); a
  fragment without an id appends to the call held at its index.  Interleaved
  parallel calls accumulate per index; calls keep the order they started in.
* ``data: {"error": {...}}`` mid-stream (vLLM, some proxies) raises the typed
  error from :func:`~nahida_workers.providers.http_errors.error_from_payload`.
* ``delta.refusal`` fragments (``message.refusal`` in a plain body) are the
  model declining: joined, they make the turn a ``REFUSAL``, never an answer.

Early reporting (``on_tool_call``, DESIGN.md section 3 "Streaming pre-start"):
the wire has no per-call end marker, so a call is *sealed* -- its arguments
are taken as complete -- when a fragment starts a different call (a later
index, or a new non-empty id at the same or a missing index: the B08 rule),
when ``finish_reason`` arrives, or at ``[DONE]`` / the end of a body that had a
terminal marker.  Starting a call seals every call before it, so calls are
reported in provider order, each once.  One caution for servers that
interleave parallel calls (a call's header first, its arguments later): when
a new call starts, an earlier call with no argument text yet, or with text
that is not yet a JSON object, is held back -- with every call after it --
until the next seal; at the terminal marker a call whose arguments still do
not parse is skipped for good
(:func:`~nahida_workers.providers.early_calls.emit_parsed`).  A body cut off
before its terminal marker seals nothing more (:meth:`OpenAIStreamParser.finish`
raises); calls sealed before the cut were already reported.  Fragments that
arrive for a call after it was reported change the final turn, not the report:
the runtime aborts a pre-start whose input the committed turn does not match.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from nahida_workers.core.messages import ProviderTurn, StopReason, Usage
from nahida_workers.providers.classify import build_turn, malformed_event, tool_call_from_raw
from nahida_workers.providers.early_calls import ToolCallSink, emit_parsed
from nahida_workers.providers.http_errors import error_from_payload
from nahida_workers.providers.sse import SSEEvent

__all__ = ["OpenAIStreamParser", "openai_usage", "parse_openai_completion"]

_STOP_MAP = {
    "stop": StopReason.END_TURN,
    "eos": StopReason.END_TURN,
    "tool_calls": StopReason.END_TURN,
    "function_call": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}
_TOOL_STOPS = frozenset({"tool_calls", "function_call"})


class _Call:
    __slots__ = ("call_id", "derived_id", "name", "parts")

    def __init__(self, call_id: str | None) -> None:
        self.call_id = call_id
        self.derived_id: str | None = None  # for a server that sends no id; stable once made
        self.name = ""
        self.parts: list[str] = []


def openai_usage(usage: dict[str, Any]) -> Usage:
    """Map a Chat Completions ``usage`` object to :class:`Usage`.

    ``prompt_tokens`` -> input (it includes cached tokens, unlike Anthropic),
    ``completion_tokens`` -> output, ``prompt_tokens_details.cached_tokens`` ->
    cache read.  Missing or null fields count as 0.
    """
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=cached or 0,
    )


class OpenAIStreamParser:
    """Accumulates Chat Completions chunks into one :class:`ProviderTurn`.

    Args:
        provider: adapter name used in error messages.
        on_tool_call: receives each client tool call once, in order, as soon
            as it is sealed and its arguments parsed into a JSON object (rules
            in the module docstring); its exceptions propagate out of
            :meth:`feed` / :meth:`finish`.
    """

    __slots__ = (
        "_calls",
        "_completion_id",
        "_current",
        "_done",
        "_finish",
        "_model",
        "_on_tool_call",
        "_provider",
        "_refusal",
        "_sealed",
        "_slots",
        "_text",
        "_usage",
    )

    def __init__(
        self, *, provider: str = "openai", on_tool_call: ToolCallSink | None = None
    ) -> None:
        self._provider = provider
        self._on_tool_call = on_tool_call
        self._sealed = 0  # calls[:_sealed] are complete and were offered to on_tool_call
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._slots: dict[int, _Call] = {}
        self._current = 0
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model: str | None = None
        self._completion_id: str | None = None
        self._done = False

    def feed(self, event: SSEEvent) -> str:
        """Consume one SSE event; return its text delta ("" when none).

        Raises:
            ProviderProtocolError: ``data`` is not a JSON object (retryable).
            ProviderAPIError: the chunk carries an ``error`` object.
        """
        if self._done:
            return ""
        data = event.data
        if data.strip() == "[DONE]":
            self._done = True
            if self._on_tool_call is not None:
                self._seal(terminal=True)
            return ""
        try:
            chunk = json.loads(data)
        except ValueError:
            raise malformed_event(self._provider) from None
        if not isinstance(chunk, dict):
            raise malformed_event(self._provider)
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> str:
        """Consume one parsed ``chat.completion.chunk``; return its text delta.

        Raises:
            ProviderAPIError: the chunk carries an ``error`` object.
        """
        error = chunk.get("error")
        if error:
            payload = error if isinstance(error, dict) else {"message": str(error)}
            raise error_from_payload(payload, provider=self._provider)
        self._chunk_metadata(chunk)
        delta_text = ""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # we never ask for n > 1
            delta_text += self._choice(choice)
        return delta_text

    def _chunk_metadata(self, chunk: dict[str, Any]) -> None:
        """Keep the last non-null usage and the first model and completion id."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        if self._completion_id is None and isinstance(chunk.get("id"), str):
            self._completion_id = chunk["id"]

    def _choice(self, choice: dict[str, Any]) -> str:
        """Consume choice 0 of a chunk; return its text delta."""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        content = delta.get("content")
        delta_text = ""
        if isinstance(content, str) and content:
            self._text.append(content)
            delta_text = content
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        for fragment in delta.get("tool_calls") or ():
            if isinstance(fragment, dict):
                self._tool_fragment(fragment)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self._finish = finish
            if self._on_tool_call is not None:
                self._seal(terminal=True)
        return delta_text

    def mark_done(self) -> None:
        """Record that the response is complete (a non-stream body has no ``[DONE]``)."""
        self._done = True

    def finish(self) -> ProviderTurn:
        """Build the turn once the body has ended.

        Raises:
            ProviderProtocolError: no ``[DONE]`` and no ``finish_reason`` while
                tool calls were in progress (retryable).
        """
        terminal = self._done or self._finish is not None
        if terminal and self._on_tool_call is not None:
            self._seal(terminal=True)
        calls = [
            tool_call_from_raw(self._call_id(n, call), call.name, "".join(call.parts))
            for n, call in enumerate(self._calls)
        ]
        return build_turn(
            api=self._provider,
            text="".join(self._text),
            calls=calls,
            raw_stop=self._finish,
            stop_map=_STOP_MAP,
            tool_stops=_TOOL_STOPS,
            usage=openai_usage(self._usage) if self._usage is not None else None,
            model=self._model,
            terminal=terminal,
            refusal="".join(self._refusal) or None,
        )

    def _tool_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):
            index = self._current
        call_id = fragment.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = None
        held = self._slots.get(index)
        if held is None or (call_id is not None and held.call_id and call_id != held.call_id):
            if self._on_tool_call is not None:
                self._seal(terminal=False)  # a new call starts: the earlier ones are complete
            held = _Call(call_id)
            self._slots[index] = held
            self._calls.append(held)
        elif call_id is not None and not held.call_id:
            held.call_id = call_id
        self._current = index
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}  # a call with no function object has no name: dropped (classify.py)
        name = function.get("name")
        if isinstance(name, str) and name and name != held.name:
            # Servers that repeat the whole name on every fragment are ignored
            # above; a genuinely fragmented name is joined.
            held.name = held.name + name if held.name else name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if arguments:
                held.parts.append(arguments)
        elif isinstance(arguments, dict):  # non-compliant servers send an object
            held.parts.append(json.dumps(arguments))

    def _seal(self, *, terminal: bool) -> None:
        """Offer every call started so far to ``on_tool_call``, in order, each once.

        Before the terminal marker (``terminal=False``: a later call started),
        a call with no argument text yet, or with text that is not yet a JSON
        object, is held -- with every call after it -- until the next seal:
        an interleaving server may still send its arguments.  At the terminal
        marker every remaining call is decided, and one that does not parse
        is skipped for good.
        """
        sink = self._on_tool_call
        assert sink is not None
        while self._sealed < len(self._calls):
            position = self._sealed
            call = self._calls[position]
            raw = "".join(call.parts)
            parsed = tool_call_from_raw(self._call_id(position, call), call.name, raw)
            if not terminal and (parsed.arguments_error is not None or not raw.strip()):
                return
            self._sealed += 1  # before the callback: a raising callback never sees it twice
            emit_parsed(sink, parsed)

    def _call_id(self, position: int, call: _Call) -> str:
        if call.call_id:
            return call.call_id
        if call.derived_id is None:
            # A server that sends no id: derive one from the completion id, once,
            # so an early report and the final turn agree.
            base = self._completion_id or uuid.uuid4().hex
            call.derived_id = f"call_{base}_{position}"
        return call.derived_id


def parse_openai_completion(
    body: dict[str, Any], *, provider: str = "openai", on_tool_call: ToolCallSink | None = None
) -> ProviderTurn:
    """Parse a non-streaming ``chat.completion`` body (a server that ignored ``stream``).

    Same rules as the stream (B09 ``variant_nonstream_response``): classified
    by the tool calls actually present, with the same anomalies.  Every parsed
    call is reported to ``on_tool_call``, in order, once the body is parsed.

    Raises:
        ProviderAPIError: the body is an ``error`` object.
    """
    parser = OpenAIStreamParser(provider=provider)
    chunk: dict[str, Any] = {k: v for k, v in body.items() if k != "choices"}
    choices = []
    for choice in body.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = dict(choice.get("message") or {})
        message["tool_calls"] = [
            {**call, "index": n}
            for n, call in enumerate(message.get("tool_calls") or ())
            if isinstance(call, dict)
        ]
        choices.append({**choice, "delta": message})
    chunk["choices"] = choices
    parser.feed_chunk(chunk)
    parser.mark_done()
    turn = parser.finish()
    if on_tool_call is not None:
        for call in turn.tool_calls:
            emit_parsed(on_tool_call, call)
    return turn
