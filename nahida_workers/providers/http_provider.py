"""The HTTP + SSE driver both real adapters share.

One attempt = one ``POST`` with ``stream: true`` over a sync ``httpx.Client``:

* non-2xx -> the body (JSON, not SSE: W06, W12) is read and translated by
  :func:`~nahida_workers.providers.http_errors.error_from_response`;
* ``application/json`` 2xx -> a server that ignored ``stream`` (case B09
  ``variant_nonstream_response``): parsed as one whole response;
* otherwise the body is decoded incrementally (:class:`SSEDecoder`) and fed
  to the adapter's pure stream parser; text deltas go to ``on_text`` as they
  arrive (display only -- a retried attempt shows its text again), and each
  tool call goes to ``on_tool_call`` as soon as the parser knows it is
  complete (streaming pre-start; ``openai_stream`` / ``anthropic_stream`` give
  the rule per format).  Across the attempts of one ``complete()`` a call
  identical to one already reported (same id, name and arguments) is not
  reported again (:class:`~nahida_workers.providers.early_calls.DedupSink`).

Transport failures are translated here (timeouts -> ``provider_timeout``,
connection/read errors -> ``provider_unavailable``, both retryable), and the
whole attempt runs under :func:`~nahida_workers.providers.retry.call_with_retries`:
the only place a provider call is retried.  The API key lives in one private
attribute; it is sent in a header and never appears in a message, log or repr.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, Protocol

import httpx

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall, ToolChoice
from nahida_workers.errors import PayloadInvalid, ProviderError
from nahida_workers.providers.classify import malformed_event
from nahida_workers.providers.early_calls import DedupSink, ToolCallSink
from nahida_workers.providers.http_errors import error_from_response
from nahida_workers.providers.retry import RetryPolicy, call_with_retries
from nahida_workers.providers.sse import SSEDecoder, SSEEvent

__all__ = ["HTTPProvider", "StreamParser"]

log = logging.getLogger(__name__)


class StreamParser(Protocol):
    """What the driver needs from a pure stream parser."""

    def feed(self, event: SSEEvent) -> str:
        """Consume one event, return its text delta."""
        ...

    def finish(self) -> ProviderTurn:
        """Build the turn after the body ended."""
        ...


class HTTPProvider:
    """Base of :class:`OpenAICompatProvider` and :class:`AnthropicProvider`.

    Args:
        base_url: API root (``https://api.openai.com/v1``, ``https://api.anthropic.com``).
        model: model name sent with every request.
        api_key: credential or ``None`` (local servers); never logged.
        timeout_s: seconds allowed for connect, and between two received chunks.
        tool_choice: default used when a request says ``auto`` (``None``: keep the request's).
        supports_tools: False -> requests carry no tool schemas at all.
        named_tool_choice: the API accepts a named ``tool_choice`` (a
            request's ``tool_name``); False sends ``required`` instead.
        max_output_tokens: reply cap in tokens when the request sets none.
        client: an ``httpx.Client`` to use (tests pass a MockTransport); the
            provider closes only a client it created itself.
        max_retries: retries after the first attempt for retryable errors.
        retry_policy: full retry limits (overrides ``max_retries``).
        sleep: how retry waits are performed (seconds; tests pass a recorder).
        name: provider name recorded on the run row (default: the API kind).
    """

    kind: ClassVar[str] = "http"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        tool_choice: ToolChoice | None = None,
        supports_tools: bool = True,
        named_tool_choice: bool = True,
        max_output_tokens: int | None = None,
        client: httpx.Client | None = None,
        max_retries: int = 2,
        retry_policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        name: str | None = None,
    ) -> None:
        self.name = name or self.kind
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.tool_choice = tool_choice
        self.supports_tools = supports_tools
        self.named_tool_choice = named_tool_choice
        self.max_output_tokens = max_output_tokens
        self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self._api_key = api_key
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout_s))

    # -- hooks each API fills in ------------------------------------------------
    def _url(self) -> str:
        raise NotImplementedError

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, request: ProviderRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _stream_parser(self, on_tool_call: ToolCallSink | None) -> StreamParser:
        raise NotImplementedError

    def _parse_body(self, body: dict[str, Any], on_tool_call: ToolCallSink | None) -> ProviderTurn:
        raise NotImplementedError

    # -- the Provider protocol ------------------------------------------------
    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        """Run one provider call (with retries) and return the parsed turn.

        ``on_tool_call`` follows :meth:`nahida_workers.ports.Provider.complete`:
        an attempt that fails after reporting calls is retried, and the retry
        may report the same call ids again -- suppressed only when id, name and
        arguments are all identical to a call already reported.

        Raises:
            ProviderAPIError: the provider answered with an error (typed by
                status; ``error_body`` holds its error object).
            ProviderProtocolError: the stream could not be understood or was
                cut off with a tool call in progress (retryable).
            ProviderError: transport failure after the retries, or a transcript
                that is not paired (``internal_error``, never sent).
        """
        try:
            body = self._body(request)
        except PayloadInvalid as exc:
            raise ProviderError(
                f"{self.name}: cannot build the request: {exc}",
                retryable=False,
                failure_code=FailureCode.INTERNAL_ERROR,
            ) from None
        sink = DedupSink(on_tool_call) if on_tool_call is not None else None
        return call_with_retries(
            lambda: self._attempt(body, on_text, sink), policy=self.retry_policy, sleep=self._sleep
        )

    def close(self) -> None:
        """Close the HTTP client if this provider created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HTTPProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
            f"base_url={self.base_url!r}, api_key={'set' if self._api_key else 'unset'})"
        )

    # -- one attempt ----------------------------------------------------------
    def _attempt(
        self,
        body: dict[str, Any],
        on_text: Callable[[str], None] | None,
        on_tool_call: ToolCallSink | None,
    ) -> ProviderTurn:
        headers = {"accept": "text/event-stream", **self._auth_headers(self._api_key)}
        try:
            with self._client.stream(
                "POST", self._url(), json=body, headers=headers, timeout=self.timeout_s
            ) as response:
                return self._read(response, on_text, on_tool_call)
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"{self.name}: timed out after {self.timeout_s} s ({type(exc).__name__})",
                retryable=True,
                failure_code=FailureCode.PROVIDER_TIMEOUT,
            ) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise ProviderError(
                f"{self.name}: invalid base_url ({type(exc).__name__})",
                retryable=False,
                failure_code=FailureCode.PROVIDER_ERROR,
            ) from None
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise ProviderError(
                f"{self.name}: connection failed ({type(exc).__name__})",
                retryable=True,
                failure_code=FailureCode.PROVIDER_UNAVAILABLE,
            ) from None

    def _read(
        self,
        response: httpx.Response,
        on_text: Callable[[str], None] | None,
        on_tool_call: ToolCallSink | None,
    ) -> ProviderTurn:
        status = response.status_code
        if not 200 <= status < 300:
            response.read()
            log.info("%s: HTTP %d from %s", self.name, status, self.model)
            raise error_from_response(
                status,
                response.headers,
                response.content,
                provider=self.name,
                secret=self._api_key,
            )
        content_type = response.headers.get("content-type", "").lower()
        if "json" in content_type and "event-stream" not in content_type:
            response.read()
            try:
                parsed = json.loads(response.content)
            except ValueError:
                raise malformed_event(self.name) from None
            if not isinstance(parsed, dict):
                raise malformed_event(self.name)
            turn = self._parse_body(parsed, on_tool_call)
            if on_text is not None and turn.text:
                on_text(turn.text)
            return turn
        parser = self._stream_parser(on_tool_call)
        decoder = SSEDecoder()
        for chunk in response.iter_bytes():
            for event in decoder.feed(chunk):
                delta = parser.feed(event)
                if delta and on_text is not None:
                    on_text(delta)
        for event in decoder.close():
            delta = parser.feed(event)
            if delta and on_text is not None:
                on_text(delta)
        return parser.finish()
