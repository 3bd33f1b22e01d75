"""Adapter for the Anthropic Messages API.

``POST {base_url}/v1/messages`` (``/messages`` when ``base_url`` already ends in
``/v1``) with ``stream: true``; the key goes in ``x-api-key`` with
``anthropic-version: 2023-06-01``.  Request bodies come from
:func:`~nahida_workers.providers.payloads.anthropic_messages_body`, stream
parsing from :mod:`~nahida_workers.providers.anthropic_stream`; the HTTP
driving, error translation and retries are shared with the OpenAI adapter
(:class:`~nahida_workers.providers.http_provider.HTTPProvider`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from nahida_workers.core.messages import ProviderRequest, ProviderTurn
from nahida_workers.providers.anthropic_stream import (
    AnthropicStreamParser,
    parse_anthropic_message,
)
from nahida_workers.providers.early_calls import ToolCallSink
from nahida_workers.providers.http_provider import HTTPProvider, StreamParser
from nahida_workers.providers.payloads import anthropic_messages_body

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value (Anthropic "Versions" doc)."""


class AnthropicProvider(HTTPProvider):
    """The Messages API as a :class:`~nahida_workers.ports.Provider`.

    Constructor arguments: see :class:`HTTPProvider` (``base_url`` like
    ``https://api.anthropic.com``).
    """

    kind: ClassVar[str] = "anthropic"

    def _url(self) -> str:
        if self.base_url.endswith("/v1"):
            return f"{self.base_url}/messages"
        return f"{self.base_url}/v1/messages"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _body(self, request: ProviderRequest) -> dict[str, Any]:
        return anthropic_messages_body(
            request,
            model=self.model,
            supports_tools=self.supports_tools,
            tool_choice=self.tool_choice,
            max_output_tokens=self.max_output_tokens,
            named_tool_choice=self.named_tool_choice,
        )

    def _stream_parser(self, on_tool_call: ToolCallSink | None) -> StreamParser:
        return AnthropicStreamParser(provider=self.name, on_tool_call=on_tool_call)

    def _parse_body(self, body: dict[str, Any], on_tool_call: ToolCallSink | None) -> ProviderTurn:
        return parse_anthropic_message(body, provider=self.name, on_tool_call=on_tool_call)
