"""Neutral :class:`ProviderRequest` -> request body of each API.

Both builders first put the transcript in *exchange order*: each assistant
message with tool calls is followed by its results in call order, then by any
user messages that arrived while those calls were open (case B06: a synthetic
result written after a later user message still lands right after its call).
The transcript must already be paired (the core guarantees it, DESIGN.md
section 3 step 1); an unpaired one raises :class:`PayloadInvalid` instead of
producing a request the API would reject with a 400.

OpenAI Chat Completions: ``system`` message first; assistant ``tool_calls``
with arguments as JSON text; one ``tool`` message per call right after it.

Anthropic Messages: top-level ``system``; assistant blocks are text then
``tool_use``; the next user message starts with the ``tool_result`` blocks for
exactly those ids in order (``is_error`` when set), and consecutive user
content is merged because roles must alternate.  Empty or whitespace-only
text is dropped (the API rejects such text blocks).  A paused turn
(``pause_turn``) is sent back with its own content blocks, as the API sent
them, so the model continues the same turn; the continuation is merged into
that assistant message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nahida_workers.core.execution_summary import summarize_tool_messages
from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.errors import PayloadInvalid

__all__ = [
    "ANTHROPIC_DEFAULT_MAX_TOKENS",
    "anthropic_messages",
    "anthropic_messages_body",
    "openai_chat_body",
    "openai_messages",
]

ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` is required by Anthropic; used when neither request nor config sets it."""

_ANTHROPIC_CHOICE = {
    ToolChoice.AUTO: {"type": "auto"},
    ToolChoice.REQUIRED: {"type": "any"},
    ToolChoice.NONE: {"type": "none"},
}


@dataclass(frozen=True)
class _Exchange:
    """An assistant message with its results in call order and the user text held behind them."""

    assistant: AssistantMessage
    results: tuple[ToolResultMessage, ...]


def _exchange_order(messages: tuple[Message, ...]) -> list[UserMessage | _Exchange]:
    out: list[UserMessage | _Exchange] = []
    open_call: AssistantMessage | None = None
    results: dict[str, ToolResultMessage] = {}
    held: list[UserMessage] = []

    def close() -> None:
        nonlocal open_call
        if open_call is None:
            return
        missing = [c.call_id for c in open_call.tool_calls if c.call_id not in results]
        if missing:
            raise PayloadInvalid(f"tool call(s) {missing} have no tool result in the transcript")
        ordered = tuple(results[c.call_id] for c in open_call.tool_calls)
        out.append(_Exchange(open_call, ordered))
        out.extend(held)
        open_call = None
        results.clear()
        held.clear()

    for message in messages:
        if isinstance(message, AssistantMessage):
            close()
            if message.tool_calls:
                open_call = message
            else:
                out.append(_Exchange(message, ()))
        elif isinstance(message, ToolResultMessage):
            ids = {c.call_id for c in open_call.tool_calls} if open_call else set()
            if message.call_id not in ids or message.call_id in results:
                raise PayloadInvalid(
                    f"tool result for {message.call_id!r} does not answer exactly one "
                    "call of the preceding assistant message"
                )
            results[message.call_id] = message
        elif open_call is not None:
            held.append(message)
        else:
            out.append(message)
    close()
    return out


def _effective_choice(request: ProviderRequest, default: ToolChoice | None) -> ToolChoice:
    # The request's explicit non-auto choice wins; "auto" means "not specified".
    if request.tool_choice is ToolChoice.AUTO and default is not None:
        return default
    return request.tool_choice


def _for_provider(request: ProviderRequest, supports_tools: bool) -> ProviderRequest:
    """The request a provider without tool calling can take: tool messages as text.

    A sourced execution summary
    (``core/execution_summary.py``) instead of tool calls and results.
    """
    if supports_tools:
        return request
    messages = summarize_tool_messages(request.messages)
    if messages == request.messages:
        return request
    return request.model_copy(update={"messages": messages})


def _named(request: ProviderRequest, named_tool_choice: bool) -> str | None:
    """The tool the request names, if the provider accepts a named choice and offers it."""
    name = request.tool_name
    if name is None or not named_tool_choice or request.tool_choice is ToolChoice.NONE:
        return None
    return name if any(t.name == name for t in request.tools) else None


def _arguments_json(call: ToolCall) -> str:
    # Parsed arguments only: a call with arguments_error is sent as {} (its
    # tool result explains the error) so strict servers never see bad JSON.
    return json.dumps(call.arguments, ensure_ascii=False)


def openai_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """The ``messages`` array for Chat Completions.

    Raises:
        PayloadInvalid: the transcript is not paired.
    """
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for item in _exchange_order(request.messages):
        if isinstance(item, UserMessage):
            out.append({"role": "user", "content": item.text})
            continue
        message: dict[str, Any] = {"role": "assistant", "content": item.assistant.text or None}
        if item.assistant.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments_json(c)},
                }
                for c in item.assistant.tool_calls
            ]
        else:
            message["content"] = item.assistant.text
        out.append(message)
        out.extend(
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in item.results
        )
    return out


def openai_chat_body(
    request: ProviderRequest,
    *,
    model: str,
    supports_tools: bool = True,
    tool_choice: ToolChoice | None = None,
    max_output_tokens: int | None = None,
    named_tool_choice: bool = True,
) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/chat/completions`` (streaming, usage included).

    Args:
        request: the neutral request.
        model: model name sent as ``model``.
        supports_tools: False -> no ``tools``/``tool_choice`` keys at all, and
            earlier tool calls and results sent as a sourced execution summary.
        tool_choice: provider default used when the request says ``auto``.
        max_output_tokens: used when the request sets none (tokens).
        named_tool_choice: the server accepts ``{"type": "function",
            "function": {"name": ...}}``; False sends ``required`` instead
            when the request names a tool.

    Raises:
        PayloadInvalid: the transcript is not paired.
    """
    request = _for_provider(request, supports_tools)
    body: dict[str, Any] = {
        "model": model,
        "messages": openai_messages(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    limit = request.max_output_tokens or max_output_tokens
    if limit is not None:
        body["max_tokens"] = limit
    if supports_tools and request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
        named = _named(request, named_tool_choice)
        if named is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": named}}
        elif request.tool_name is not None and request.tool_choice is not ToolChoice.NONE:
            body["tool_choice"] = ToolChoice.REQUIRED.value
        else:
            body["tool_choice"] = _effective_choice(request, tool_choice).value
    return body


def anthropic_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """The ``messages`` array for Anthropic Messages (alternating roles).

    Raises:
        PayloadInvalid: the transcript is not paired.
    """
    turns: list[tuple[str, list[dict[str, Any]]]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))

    for item in _exchange_order(request.messages):
        if isinstance(item, UserMessage):
            add("user", [{"type": "text", "text": item.text}] if item.text.strip() else [])
            continue
        blocks = _paused_blocks(item.assistant)
        if blocks is None:
            blocks = []
            if item.assistant.text.strip():
                blocks.append({"type": "text", "text": item.assistant.text})
            blocks.extend(
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments}
                for c in item.assistant.tool_calls
            )
        add("assistant", blocks)
        add("user", [_tool_result(r) for r in item.results])
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        if role == "user" and len(blocks) == 1 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks})
    return out


def _intact(value: Any) -> bool:
    """False when the ledger's size cap replaced part of a stored block."""
    if isinstance(value, dict):
        return not value.get("capped") and all(_intact(v) for v in value.values())
    if isinstance(value, list):
        return all(_intact(v) for v in value)
    return True


def _paused_blocks(message: AssistantMessage) -> list[dict[str, Any]] | None:
    """The content blocks of a paused turn, as sent; None to build them from text.

    Blocks a size cap altered cannot go back verbatim: the text is used then.
    """
    if not message.content_blocks or message.tool_calls:
        return None
    if not all(_intact(b) for b in message.content_blocks):
        return None
    return [
        dict(b)
        for b in message.content_blocks
        if not (b.get("type") == "text" and not str(b.get("text", "")).strip())
    ]


def _tool_result(result: ToolResultMessage) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": result.content,
    }
    if result.is_error:
        block["is_error"] = True
    return block


def anthropic_messages_body(
    request: ProviderRequest,
    *,
    model: str,
    supports_tools: bool = True,
    tool_choice: ToolChoice | None = None,
    max_output_tokens: int | None = None,
    named_tool_choice: bool = True,
) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/v1/messages`` (streaming).

    ``tool_choice`` maps auto -> ``{"type": "auto"}``, required ->
    ``{"type": "any"}``, none -> ``{"type": "none"}``, a named tool ->
    ``{"type": "tool", "name": ...}`` (Anthropic tool-use doc; ``any`` when
    ``named_tool_choice`` is False).  Without tool support, earlier tool
    calls and results go as a sourced execution summary.
    ``max_tokens`` is required: request, then config, then
    :data:`ANTHROPIC_DEFAULT_MAX_TOKENS`.

    Raises:
        PayloadInvalid: the transcript is not paired.
    """
    request = _for_provider(request, supports_tools)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_output_tokens
        or max_output_tokens
        or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "messages": anthropic_messages(request),
        "stream": True,
    }
    if request.system:
        body["system"] = request.system
    if supports_tools and request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        named = _named(request, named_tool_choice)
        if named is not None:
            body["tool_choice"] = {"type": "tool", "name": named}
        elif request.tool_name is not None and request.tool_choice is not ToolChoice.NONE:
            body["tool_choice"] = dict(_ANTHROPIC_CHOICE[ToolChoice.REQUIRED])
        else:
            body["tool_choice"] = dict(_ANTHROPIC_CHOICE[_effective_choice(request, tool_choice)])
    return body
