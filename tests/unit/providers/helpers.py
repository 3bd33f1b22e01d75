"""Shared helpers for the provider tests: fixtures, replay transports, a byte server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from nahida_workers.core.messages import ProviderRequest, StopReason, Usage, UserMessage
from nahida_workers.providers import AnthropicProvider, OpenAICompatProvider
from nahida_workers.providers.http_provider import HTTPProvider

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
WIRE_IDS = [f"W{n:02d}" for n in range(1, 13)]
KEY = "sk-test-SECRET-0123456789abcdef"


def wire(wid: str) -> dict[str, Any]:
    """One recording from tests/fixtures/wire."""
    data: dict[str, Any] = json.loads((FIXTURES / "wire" / f"{wid}.json").read_text("utf-8"))
    return data


def case(cid: str) -> dict[str, Any]:
    """One bug-report case from tests/fixtures/cases."""
    data: dict[str, Any] = json.loads((FIXTURES / "cases" / f"{cid}.json").read_text("utf-8"))
    return data


def sse_body(lines: Sequence[str]) -> bytes:
    """Case files list one ``data:`` line per event: frame them as an event stream."""
    return "".join(f"{line}\n\n" for line in lines).encode("utf-8")


def simple_request(**kwargs: Any) -> ProviderRequest:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "turn_index": 0,
        "messages": (UserMessage(text="hi"),),
    }
    base.update(kwargs)
    return ProviderRequest(**base)


# -- what a recording's `expected` means in our vocabulary (derived independently) --


def expected_usage(api: str, usage: Mapping[str, Any]) -> Usage:
    if api == "openai-chat":
        details = usage.get("prompt_tokens_details") or {}
        return Usage(
            input_tokens=usage["prompt_tokens"],
            output_tokens=usage["completion_tokens"],
            cache_read_tokens=details.get("cached_tokens", 0),
        )
    return Usage(
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
    )


_STOPS = {
    "stop": StopReason.END_TURN,
    "end_turn": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "max_tokens": StopReason.MAX_TOKENS,
}


def expected_stop(expected: Mapping[str, Any]) -> tuple[StopReason, str]:
    raw = expected.get("finish_reason") or expected.get("stop_reason")
    assert isinstance(raw, str)
    return (StopReason.TOOL_CALLS if expected["tool_calls"] else _STOPS[raw]), raw


def provider_for_wire(
    w: dict[str, Any], client: httpx.Client, base: str | None = None
) -> HTTPProvider:
    """The recording's adapter (OpenAI or Anthropic) over ``client``; retry waits are not slept."""
    sleeps: list[float] = []
    if w["api"] == "openai-chat":
        return OpenAICompatProvider(
            base_url=(base or "https://api.example.test") + "/v1",
            model=w["request"]["model"],
            api_key=KEY,
            client=client,
            sleep=sleeps.append,
        )
    return AnthropicProvider(
        base_url=base or "https://api.example.test",
        model=w["request"]["model"],
        api_key=KEY,
        client=client,
        sleep=sleeps.append,
    )


# -- transports ---------------------------------------------------------------


class Recorder:
    """An httpx MockTransport handler answering from a list of responses, recording requests."""

    def __init__(self, responses: Sequence[httpx.Response | Callable[[], httpx.Response]]):
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        return item() if callable(item) else item

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def recorded_response(
    w: Mapping[str, Any], chunks: Sequence[bytes] | None = None
) -> httpx.Response:
    """The recording's status, headers and exact body bytes, optionally in given chunks."""
    body = w["sse"].encode("utf-8")
    if chunks is None:
        return httpx.Response(w["status"], headers=w["headers"], content=body)
    assert b"".join(chunks) == body
    return httpx.Response(w["status"], headers=w["headers"], content=iter(list(chunks)))


@contextmanager
def byte_server(status: int, headers: Mapping[str, str], body: bytes) -> Iterator[str]:
    """A real 127.0.0.1 HTTP server answering every POST with these exact bytes."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            half = len(body) // 2  # two writes, so the client sees more than one chunk
            self.wfile.write(body[:half])
            self.wfile.flush()
            self.wfile.write(body[half:])

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
