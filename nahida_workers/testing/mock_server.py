"""A small OpenAI-compatible streaming server that serves a provider script.

For users (``nahida mock-llm --script FILE --port N``) and for tests: it speaks
real Chat Completions SSE (a role chunk, content deltas, ``tool_calls`` deltas
with index/id/name and arguments in 2+ fragments, ``finish_reason``, a usage
chunk with empty ``choices`` when ``stream_options.include_usage`` is set, then
``data: [DONE]``), so :class:`OpenAICompatProvider` is exercised end to end.

It serves the same script format as :class:`ScriptedProvider` and is
stateless: the turn served is the number of assistant messages in the request,
so a run resumed after a crash continues at the right turn.  A later run of a
session sends the earlier runs' history too, so its turns are counted after
theirs: the script's ``turns`` then each of ``next_runs``, in order (exact as
long as every run used exactly its own turns -- a correction turn shifts it).  ``${result:...}``
references resolve exactly as in ``scripted.py`` (its ``scripted_turn`` is
reused on a neutral request read back from the body).  A script ``error`` turn
answers with its HTTP status, an OpenAI-style error body and ``Retry-After``;
running out of script answers 400 with code ``script_exhausted``.

Endpoints: ``POST /v1/chat/completions`` (streaming or not), ``GET /v1/models``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import ProviderTurn, StopReason
from nahida_workers.providers.openai_reader import request_from_openai_body
from nahida_workers.providers.scripted import Script, load_script, scripted_turn

__all__ = ["MockLLMServer", "openai_stream_chunks", "serve_mock_llm"]

_FINISH = {
    StopReason.TOOL_CALLS: "tool_calls",
    StopReason.END_TURN: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTENT_FILTER: "content_filter",
    StopReason.REFUSAL: "stop",  # OpenAI sends the refusal as content, the finish is "stop"
    StopReason.PAUSE_TURN: "stop",  # no such thing in Chat Completions
    StopReason.OTHER: "stop",
}
_ERROR_TYPE = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}  # fmt: skip
_WORDS = re.compile(r"\S+\s*|\s+")


def _fragments(text: str) -> list[str]:
    """Split argument text into 2+ fragments (1 when shorter than 2 characters)."""
    if len(text) < 2:
        return [text]
    step = max(1, -(-len(text) // 3))
    return [text[i : i + step] for i in range(0, len(text), step)]


def openai_stream_chunks(
    turn: ProviderTurn, *, model: str, completion_id: str, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects that stream ``turn`` (OpenAI's layout)."""
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice], "usage": None}

    yield chunk({"role": "assistant", "content": "" if turn.text else None})
    for piece in _WORDS.findall(turn.text):
        yield chunk({"content": piece})
    if turn.refusal:
        yield chunk({"refusal": turn.refusal})
    for index, call in enumerate(turn.tool_calls):
        text = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)
        head = {"index": index, "id": call.call_id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for fragment in _fragments(text):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, _FINISH[turn.stop_reason])
    if include_usage:
        usage = turn.usage
        prompt, completion = (usage.input_tokens, usage.output_tokens) if usage else (0, 0)
        yield {
            **base,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


def _completion_body(turn: ProviderTurn, *, model: str, completion_id: str) -> dict[str, Any]:
    calls = [
        {
            "id": c.call_id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": c.raw_arguments
                if c.raw_arguments is not None
                else json.dumps(c.arguments),
            },
        }
        for c in turn.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.refusal:
        message["refusal"] = turn.refusal
    if calls:
        message["tool_calls"] = calls
    usage = turn.usage
    prompt, completion = (usage.input_tokens, usage.output_tokens) if usage else (0, 0)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _FINISH[turn.stop_reason]}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    }  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = self.server.mock.model
            data = [{"id": model, "object": "model", "created": 0, "owned_by": "nahida"}]
            self._json(200, {"object": "list", "data": data})
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}", "not_found")
            return
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._error(400, "request body is not a JSON object", "invalid_json")
            return
        mock = self.server.mock
        mock.record(body)
        request = request_from_openai_body(body)
        # A later run's request holds the session's earlier runs too (their
        # assistant messages count): its turns follow the earlier runs' turns.
        turns = tuple(t for run in (mock.script.turns, *mock.script.next_runs) for t in run)
        if request.turn_index >= len(turns):
            message = f"script exhausted: no turn {request.turn_index} (script has {len(turns)})"
            self._error(400, message, FailureCode.SCRIPT_EXHAUSTED.value)
            return
        turn = turns[request.turn_index]
        if turn.delay_s > 0:
            time.sleep(turn.delay_s)
        if turn.error is not None:
            retry_after = turn.error.retry_after
            headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
            self._error(turn.error.status, turn.error.message, None, headers)
            return
        result = scripted_turn(turn, request)
        completion_id = f"chatcmpl-mock-{request.turn_index}"
        if not body.get("stream"):
            self._json(200, _completion_body(result, model=mock.model, completion_id=completion_id))
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = openai_stream_chunks(
            result, model=mock.model, completion_id=completion_id, include_usage=include_usage
        )
        self._stream([f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"])

    def _stream(self, events: list[str]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                data = event.encode("utf-8")
                self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(
        self, status: int, message: str, code: str | None, headers: Mapping[str, str] = {}
    ) -> None:
        kind = _ERROR_TYPE.get(status, "server_error" if status >= 500 else "invalid_request_error")
        error = {"message": message, "type": kind, "param": None, "code": code}
        self._json(status, {"error": error}, headers)

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] = {}) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    mock: MockLLMServer


class MockLLMServer:
    """A running mock server (use :func:`serve_mock_llm`).

    Attributes:
        url: base URL for ``OpenAICompatProvider``, like ``http://127.0.0.1:PORT/v1``.
        requests: every JSON body received on ``/chat/completions``, in order.
        script: the turns served.
        model: the model name reported.
    """

    def __init__(self, script: Script, *, host: str, port: int, model: str) -> None:
        self.script = script
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.mock = self
        bound_port = int(self._server.server_address[1])
        self.url = f"http://{host}:{bound_port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll
            name="nahida-mock-llm",
            daemon=True,
        )
        self._thread.start()

    def record(self, body: dict[str, Any]) -> None:
        """Append a received body to :attr:`requests` (thread-safe)."""
        with self._lock:
            self.requests.append(body)

    def run_forever(self) -> None:
        """Block until interrupted (Ctrl-C), then stop the server."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.close()

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> MockLLMServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def serve_mock_llm(
    script: Script | str | Path | Mapping[str, Any],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    model: str = "scripted",
) -> MockLLMServer:
    """Start a mock server in a background thread and return it (already serving).

    Args:
        script: a :class:`Script`, a path to a YAML/JSON script, its text, or a mapping.
        host: interface to bind.
        port: TCP port; 0 picks a free one (read it back from ``.url``).
        model: model name reported in chunks and ``/v1/models``.

    Raises:
        ConfigError: the script is malformed.
        OSError: the port is taken.
    """
    loaded = script if isinstance(script, Script) else load_script(script)
    return MockLLMServer(loaded, host=host, port=port, model=model)
