"""Adapter for OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp ...).

``POST {base_url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage``; the key goes in ``Authorization: Bearer``.
Request bodies come from :func:`~nahida_workers.providers.payloads.openai_chat_body`,
stream parsing from :mod:`~nahida_workers.providers.openai_stream`; the HTTP
driving, error translation and retries are shared with the Anthropic adapter
(:class:`~nahida_workers.providers.http_provider.HTTPProvider`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from nahida_workers.core.messages import ProviderRequest, ProviderTurn
from nahida_workers.providers.early_calls import ToolCallSink
from nahida_workers.providers.http_provider import HTTPProvider, StreamParser
from nahida_workers.providers.openai_stream import OpenAIStreamParser, parse_openai_completion
from nahida_workers.providers.payloads import openai_chat_body

__all__ = ["OpenAICompatProvider"]


class OpenAICompatProvider(HTTPProvider):
    """A Chat Completions endpoint as a :class:`~nahida_workers.ports.Provider`.

    Constructor arguments: see :class:`HTTPProvider` (``base_url`` includes
    ``/v1``, e.g. ``https://api.openai.com/v1`` or ``http://localhost:11434/v1``).
    """

    kind: ClassVar[str] = "openai"

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _body(self, request: ProviderRequest) -> dict[str, Any]:
        return openai_chat_body(
            request,
            model=self.model,
            supports_tools=self.supports_tools,
            tool_choice=self.tool_choice,
            max_output_tokens=self.max_output_tokens,
            named_tool_choice=self.named_tool_choice,
        )

    def _stream_parser(self, on_tool_call: ToolCallSink | None) -> StreamParser:
        return OpenAIStreamParser(provider=self.name, on_tool_call=on_tool_call)

    def _parse_body(self, body: dict[str, Any], on_tool_call: ToolCallSink | None) -> ProviderTurn:
        return parse_openai_completion(body, provider=self.name, on_tool_call=on_tool_call)
