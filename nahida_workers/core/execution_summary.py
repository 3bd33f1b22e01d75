"""A sourced execution summary for a provider without tool calling (docs/concepts/context.md).

A session's transcript may hold tool calls and results that a provider
without tool calling (``supports_tools: false``) cannot take: an earlier run
of the session ran on another provider, or a fallback provider took over in
the middle of a run.  Sending them as tool messages makes such a server
refuse the request; dropping them loses what the session learned.  So the
adapter sends them as text instead: the assistant's own words stay, and each
group of results becomes one user message that says it comes from the
runtime's ledger, one entry per call with its tool, arguments, call id and
status, then the result (its first :data:`RESULT_EXCERPT_CHARS` characters).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["RESULT_EXCERPT_CHARS", "SUMMARY_HEADER", "summarize_tool_messages"]

#: Characters of one result quoted in the summary (the rest is said to be cut).
RESULT_EXCERPT_CHARS = 2000
#: First line of each summary message: where the text comes from.
SUMMARY_HEADER = (
    "[runtime execution summary: these tool calls ran earlier in this session; the "
    "results are quoted from the runtime's ledger, not written by the user]"
)


def _entry(call: ToolCall | None, result: ToolResultMessage) -> str:
    name = call.name if call is not None else result.name
    args = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True) if call else "{}"
    status = "error" if result.is_error else "ok"
    content = result.content
    cut = ""
    if len(content) > RESULT_EXCERPT_CHARS:
        cut = f"\n[... {len(content) - RESULT_EXCERPT_CHARS} more characters not shown]"
        content = content[:RESULT_EXCERPT_CHARS]
    return f"- {name} {args} (ledger call {result.call_id}): {status}\n{content}{cut}"


def summarize_tool_messages(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` with every tool call and result turned into text.

    Args:
        messages: a paired transcript (``core/transcript.py``).

    Returns:
        The same conversation with no ``tool_calls`` and no tool messages:
        an assistant message keeps its text (dropped when it has none); the
        results that follow it become one :class:`UserMessage` headed by
        :data:`SUMMARY_HEADER`.  A transcript with no tool messages is
        returned unchanged.
    """
    if not any(
        isinstance(m, ToolResultMessage) or (isinstance(m, AssistantMessage) and m.tool_calls)
        for m in messages
    ):
        return tuple(messages)
    out: list[Message] = []
    calls: dict[str, ToolCall] = {}
    group: list[str] = []

    def flush() -> None:
        if group:
            out.append(UserMessage(text="\n".join([SUMMARY_HEADER, *group])))
            group.clear()

    for message in messages:
        if isinstance(message, ToolResultMessage):
            group.append(_entry(calls.get(message.call_id), message))
            continue
        flush()
        if isinstance(message, AssistantMessage):
            calls.update({c.call_id: c for c in message.tool_calls})
            if message.text.strip():
                out.append(AssistantMessage(text=message.text))
        else:
            out.append(message)
    flush()
    return tuple(out)
