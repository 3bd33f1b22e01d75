"""Read a Chat Completions request body back into a neutral :class:`ProviderRequest`.

The inverse of :func:`~nahida_workers.providers.payloads.openai_messages`, for
the mock server: it serves scripted turns (and resolves ``${result:...}``
references with ``scripted.py``'s own rules) from what a client sent.
"""

from __future__ import annotations

import json
from typing import Any

from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["request_from_openai_body"]


def request_from_openai_body(body: dict[str, Any], *, run_id: str = "mock") -> ProviderRequest:
    """Read a Chat Completions request body back into a neutral request.

    Used by the mock server to serve the scripted provider's turns (and to
    resolve ``${result:...}`` references).  ``turn_index`` is the number of
    assistant messages in the body, so serving is stateless across resumes.
    Non-text content parts are joined as text; unknown roles are skipped.
    """
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}
    turns = 0
    for raw in body.get("messages") or ():
        role = raw.get("role")
        text = _content_text(raw.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            messages.append(UserMessage(text=text))
        elif role == "assistant":
            turns += 1
            calls = []
            for call in raw.get("tool_calls") or ():
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                name = str(function.get("name") or "")
                names[str(call.get("id"))] = name
                calls.append(
                    ToolCall(
                        call_id=str(call.get("id")),
                        name=name,
                        arguments=arguments if isinstance(arguments, dict) else {},
                    )
                )
            messages.append(AssistantMessage(text=text, tool_calls=tuple(calls)))
        elif role == "tool":
            call_id = str(raw.get("tool_call_id"))
            messages.append(
                ToolResultMessage(call_id=call_id, name=names.get(call_id, ""), content=text)
            )
    return ProviderRequest(
        run_id=run_id,
        turn_index=turns,
        system="\n".join(system) or None,
        messages=tuple(messages),
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
