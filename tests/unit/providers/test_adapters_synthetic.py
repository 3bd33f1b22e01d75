"""Adapter behaviour on SYNTHETIC input.

No recording in tests/fixtures/wire has these (its README says so): a 429 or
5xx with Retry-After, an Anthropic `event: error` mid-stream, an OpenAI stream
with text and tool calls together, cut-off streams, invalid JSON arguments.
The bytes below are hand-written in each API's documented wire format.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import (
    AssistantMessage,
    StopReason,
    ToolCall,
    ToolSchema,
    UserMessage,
)
from nahida_workers.errors import ProviderError, ProviderProtocolError
from nahida_workers.providers import AnthropicProvider, OpenAICompatProvider, ProviderAPIError
from nahida_workers.providers.http_provider import HTTPProvider
from tests.unit.providers.helpers import KEY, Recorder, simple_request, sse_body

SSE = {"content-type": "text/event-stream"}
OPENAI_URL = "https://api.example.test/v1"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"id": "chatcmpl-s", "choices": [choice], **extra})


def tool(
    index: int, *, call_id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if call_id:
        fragment.update(id=call_id, type="function")
        fragment["function"]["name"] = name
    return {"tool_calls": [fragment]}


TEXT_AND_TOOLS = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me "}),
    chunk({"content": "check."}),
    chunk(tool(0, call_id="call_1", name="Read", args="")),
    chunk(tool(1, call_id="call_2", name="Glob", args='{"pat')),
    chunk(tool(0, args='{"path": "REA')),
    chunk(tool(1, args='tern": "*.py"}')),
    chunk(tool(0, args='DME.md"}')),
    chunk({}, "tool_calls"),
    "data: "
    + json.dumps(
        {"id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}
    ),
    "data: [DONE]",
]


def anthropic_events(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


MSG_START = {
    "type": "message_start",
    "message": {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 1}},
}
TEXT_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "text", "text": ""},
}


def text_delta(text: str, index: int = 0) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def openai(recorder: Recorder, **kwargs: Any) -> tuple[OpenAICompatProvider, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("api_key", KEY)
    provider = OpenAICompatProvider(
        base_url=OPENAI_URL, model="gpt-x", client=recorder.client(), sleep=sleeps.append, **kwargs
    )
    return provider, sleeps


def anthropic(recorder: Recorder, **kwargs: Any) -> tuple[AnthropicProvider, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("api_key", KEY)
    provider = AnthropicProvider(
        base_url="https://api.anthropic.test", model="claude-x", client=recorder.client(),
        sleep=sleeps.append, **kwargs,
    )  # fmt: skip
    return provider, sleeps


def ok_text(text: str = "ok") -> httpx.Response:
    lines = [chunk({"content": text}), chunk({}, "stop"), "data: [DONE]"]
    return httpx.Response(200, headers=SSE, content=sse_body(lines))


# -- retries and error translation -------------------------------------------------


def test_429_with_retry_after_is_retried_after_at_least_that_long() -> None:
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{OPENAI_URL}/chat/completions").mock(
            side_effect=[
                httpx.Response(
                    429,
                    headers={"retry-after": "2"},
                    json={
                        "error": {
                            "type": "requests",
                            "code": "rate_limit_exceeded",
                            "message": "slow",
                        }
                    },
                ),
                ok_text("after wait"),
            ]
        )
        sleeps: list[float] = []
        with httpx.Client() as client:
            provider = OpenAICompatProvider(
                base_url=OPENAI_URL, model="gpt-x", api_key=KEY, client=client, sleep=sleeps.append
            )
            turn = provider.complete(simple_request())
    assert turn.text == "after wait"
    assert route.call_count == 2
    assert len(sleeps) == 1 and sleeps[0] >= 2.0


def test_503_every_time_gives_up_after_max_retries_with_a_retryable_error() -> None:
    recorder = Recorder([httpx.Response(503, json={"error": {"type": "server_error"}})])
    provider, sleeps = openai(recorder, max_retries=3)
    with pytest.raises(ProviderAPIError) as info:
        provider.complete(simple_request())
    assert len(recorder.requests) == 4  # first attempt + 3 retries
    assert len(sleeps) == 3 and sleeps == sorted(sleeps)  # exponential backoff grows
    assert info.value.retryable is True
    assert info.value.failure_code is FailureCode.PROVIDER_UNAVAILABLE
    assert info.value.status == 503


def test_401_is_not_retried_and_never_shows_the_key() -> None:
    body = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    recorder = Recorder([httpx.Response(401, json=body)])
    provider, sleeps = openai(recorder)
    with pytest.raises(ProviderAPIError) as info:
        provider.complete(simple_request())
    exc = info.value
    assert (exc.retryable, exc.failure_code, exc.status) == (False, FailureCode.PROVIDER_AUTH, 401)
    assert len(recorder.requests) == 1 and sleeps == []
    assert exc.error_code == "invalid_api_key"
    assert KEY not in str(exc) and KEY not in repr(exc) and KEY not in repr(provider)
    assert KEY not in json.dumps(exc.error_body)  # echoed key scrubbed from the parsed body


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (400, FailureCode.PROVIDER_BAD_REQUEST, False),
        (403, FailureCode.PROVIDER_AUTH, False),
        (404, FailureCode.PROVIDER_NOT_FOUND, False),
        (408, FailureCode.PROVIDER_TIMEOUT, True),
        (409, FailureCode.PROVIDER_UNAVAILABLE, True),
        (422, FailureCode.PROVIDER_BAD_REQUEST, False),
        (429, FailureCode.PROVIDER_RATE_LIMITED, True),
        (500, FailureCode.PROVIDER_UNAVAILABLE, True),
        (529, FailureCode.PROVIDER_UNAVAILABLE, True),
    ],
)
def test_status_translation(status: int, code: FailureCode, retryable: bool) -> None:
    recorder = Recorder([httpx.Response(status, text="not json at all")])
    provider, _ = openai(recorder, max_retries=0)
    with pytest.raises(ProviderAPIError) as info:
        provider.complete(simple_request())
    assert (info.value.failure_code, info.value.retryable) == (code, retryable)
    assert info.value.error_body is None


def test_retry_after_http_date_and_should_retry_override() -> None:
    date = "Wed, 21 Oct 2015 07:28:00 GMT"  # in the past -> wait 0, still retryable
    recorder = Recorder([httpx.Response(503, headers={"retry-after": date}), ok_text()])
    provider, sleeps = openai(recorder)
    assert provider.complete(simple_request()).text == "ok"
    assert len(sleeps) == 1
    # x-should-retry: true makes a 400 retryable; false makes a 500 final (W12's header).
    recorder = Recorder([httpx.Response(400, headers={"x-should-retry": "true"}), ok_text()])
    assert openai(recorder)[0].complete(simple_request()).text == "ok"
    recorder = Recorder([httpx.Response(500, headers={"x-should-retry": "false"})])
    with pytest.raises(ProviderAPIError) as info:
        openai(recorder)[0].complete(simple_request())
    assert info.value.retryable is False and len(recorder.requests) == 1


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (httpx.ConnectError("refused"), FailureCode.PROVIDER_UNAVAILABLE),
        (httpx.ReadError("reset"), FailureCode.PROVIDER_UNAVAILABLE),
        (httpx.ReadTimeout("slow"), FailureCode.PROVIDER_TIMEOUT),
    ],
)
def test_transport_errors_are_retryable_and_typed(exc: Exception, code: FailureCode) -> None:
    def fail() -> httpx.Response:
        raise exc

    recorder = Recorder([fail])
    provider, sleeps = openai(recorder, max_retries=1)
    with pytest.raises(ProviderError) as info:
        provider.complete(simple_request())
    assert (info.value.failure_code, info.value.retryable) == (code, True)
    assert len(recorder.requests) == 2 and len(sleeps) == 1
    assert KEY not in str(info.value)


# -- stream content ------------------------------------------------------------------


def test_openai_text_and_interleaved_tool_calls_in_one_turn() -> None:
    recorder = Recorder([httpx.Response(200, headers=SSE, content=sse_body(TEXT_AND_TOOLS))])
    provider, _ = openai(recorder)
    deltas: list[str] = []
    turn = provider.complete(simple_request(), on_text=deltas.append)
    assert turn.text == "Let me check." and deltas == ["Let me ", "check."]
    assert [(c.call_id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_1", "Read", {"path": "README.md"}),
        ("call_2", "Glob", {"pattern": "*.py"}),
    ]
    assert turn.stop_reason is StopReason.TOOL_CALLS and turn.anomalies == ()
    assert turn.usage is not None and turn.usage.input_tokens == 9


def test_openai_invalid_or_non_object_arguments_become_arguments_error() -> None:
    lines = [
        chunk(tool(0, call_id="c1", name="Read", args='{"path": "a",')),
        chunk(tool(1, call_id="c2", name="Read", args="[1, 2]")),
        chunk(tool(2, call_id="c3", name="Read", args="")),
        chunk({}, "tool_calls"),
        "data: [DONE]",
    ]
    recorder = Recorder([httpx.Response(200, headers=SSE, content=sse_body(lines))])
    turn = openai(recorder)[0].complete(simple_request())
    bad, not_object, empty = turn.tool_calls
    assert bad.arguments == {} and bad.raw_arguments == '{"path": "a",'
    assert bad.arguments_error is not None and "not valid JSON" in bad.arguments_error
    assert (
        not_object.arguments_error is not None and "not a JSON object" in not_object.arguments_error
    )
    assert (empty.arguments, empty.arguments_error) == ({}, None)  # "" counts as {}
    assert turn.stop_reason is StopReason.TOOL_CALLS


def test_openai_stream_cut_off_mid_arguments_raises_and_is_retried() -> None:
    cut = [chunk(tool(0, call_id="c1", name="Bash", args='{"command": "rm -rf bu'))]
    first = httpx.Response(200, headers=SSE, content=sse_body(cut))
    recorder = Recorder([first])
    with pytest.raises(ProviderProtocolError) as info:
        openai(recorder, max_retries=0)[0].complete(simple_request())
    assert info.value.retryable is True
    assert info.value.failure_code is FailureCode.PROVIDER_PROTOCOL_INVALID
    assert "cut off" in str(info.value)
    # The retry layer asks again; the complete second answer is used.
    recorder = Recorder([httpx.Response(200, headers=SSE, content=sse_body(cut)), ok_text("fine")])
    assert openai(recorder)[0].complete(simple_request()).text == "fine"


def test_openai_text_only_stream_without_end_marker_is_retried_not_kept() -> None:
    """Text that stops before ``[DONE]`` or a finish reason is no answer: retried like a reset."""
    lines = [chunk({"content": "partial ans"})]
    cut = httpx.Response(200, headers=SSE, content=sse_body(lines))
    with pytest.raises(ProviderProtocolError, match="cut off") as info:
        openai(Recorder([cut]), max_retries=0)[0].complete(simple_request())
    assert info.value.retryable is True and info.value.truncated is True
    cut = httpx.Response(200, headers=SSE, content=sse_body(lines))
    recorder = Recorder([cut, ok_text("the whole answer")])
    assert openai(recorder)[0].complete(simple_request()).text == "the whole answer"


def test_malformed_json_event_is_a_protocol_error() -> None:
    body = b'data: {"id": "x", "choices": [\n\n'
    recorder = Recorder([httpx.Response(200, headers=SSE, content=body)])
    with pytest.raises(ProviderProtocolError, match="malformed JSON"):
        openai(recorder, max_retries=0)[0].complete(simple_request())


def test_openai_error_object_inside_the_stream() -> None:
    lines = [
        chunk({"content": "a"}),
        'data: {"error": {"type": "server_error", "message": "boom"}}',
    ]
    recorder = Recorder([httpx.Response(200, headers=SSE, content=sse_body(lines))])
    with pytest.raises(ProviderAPIError) as info:
        openai(recorder, max_retries=0)[0].complete(simple_request())
    assert info.value.retryable and info.value.failure_code is FailureCode.PROVIDER_UNAVAILABLE


def test_anthropic_mid_stream_overloaded_error_is_retryable() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = anthropic_events(MSG_START, TEXT_START, text_delta("Hel"), error)
    recorder = Recorder([httpx.Response(200, headers=SSE, content=body)])
    with pytest.raises(ProviderAPIError) as info:
        anthropic(recorder, max_retries=0)[0].complete(simple_request())
    exc = info.value
    assert exc.retryable is True
    assert exc.failure_code is FailureCode.PROVIDER_UNAVAILABLE
    assert exc.error_body == error["error"] and exc.error_type == "overloaded_error"
    good = anthropic_events(
        MSG_START, TEXT_START, text_delta("Hello"),
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    )  # fmt: skip
    recorder = Recorder(
        [
            httpx.Response(200, headers=SSE, content=body),
            httpx.Response(200, headers=SSE, content=good),
        ]
    )
    provider, sleeps = anthropic(recorder)
    turn = provider.complete(simple_request())
    assert turn.text == "Hello" and len(sleeps) == 1
    assert turn.usage is not None and (turn.usage.input_tokens, turn.usage.output_tokens) == (5, 3)


def test_anthropic_cut_off_inside_tool_use_raises() -> None:
    body = anthropic_events(
        MSG_START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"command": "ls'},
        },
    )
    recorder = Recorder([httpx.Response(200, headers=SSE, content=body)])
    with pytest.raises(ProviderProtocolError, match="cut off"):
        anthropic(recorder, max_retries=0)[0].complete(simple_request())


def test_anthropic_invalid_tool_input_json_becomes_arguments_error() -> None:
    body = anthropic_events(
        MSG_START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"command": ls}'},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    )
    turn = anthropic(Recorder([httpx.Response(200, headers=SSE, content=body)]))[0].complete(
        simple_request()
    )
    (call,) = turn.tool_calls
    assert call.arguments == {} and call.raw_arguments == '{"command": ls}' and call.arguments_error


# -- requests on the wire --------------------------------------------------------------


def test_headers_carry_the_key_the_way_each_api_wants() -> None:
    recorder = Recorder([ok_text()])
    openai(recorder)[0].complete(simple_request())
    assert recorder.requests[0].headers["authorization"] == f"Bearer {KEY}"
    recorder = Recorder([ok_text()])
    openai(recorder, api_key=None)[0].complete(simple_request())
    assert "authorization" not in recorder.requests[0].headers
    good = anthropic_events(MSG_START, {"type": "message_stop"})
    recorder = Recorder([httpx.Response(200, headers=SSE, content=good)])
    anthropic(recorder)[0].complete(simple_request())
    sent = recorder.requests[0]
    assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert str(sent.url) == "https://api.anthropic.test/v1/messages"


def test_supports_tools_false_sends_no_tools_key() -> None:
    schema = ToolSchema(name="Read", description="read", input_schema={"type": "object"})
    for supports in (True, False):
        recorder = Recorder([ok_text()])
        openai(recorder, supports_tools=supports)[0].complete(simple_request(tools=(schema,)))
        body = recorder.bodies()[0]
        assert ("tools" in body, "tool_choice" in body) == (supports, supports)
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_unpaired_transcript_is_refused_before_any_request() -> None:
    call = ToolCall(call_id="c1", name="Read")
    request = simple_request(
        messages=(UserMessage(text="hi"), AssistantMessage(tool_calls=(call,)))
    )
    recorder = Recorder([ok_text()])
    with pytest.raises(ProviderError) as info:
        openai(recorder)[0].complete(request)
    assert info.value.failure_code is FailureCode.INTERNAL_ERROR and not info.value.retryable
    assert recorder.requests == []


@pytest.mark.parametrize("factory", [openai, anthropic])
def test_repr_never_shows_the_key(factory: Any) -> None:
    provider: HTTPProvider = factory(Recorder([ok_text()]))[0]
    assert KEY not in repr(provider) and KEY not in str(provider)
    assert "api_key=set" in repr(provider)


def test_anthropic_server_ignoring_stream_answers_json() -> None:
    message = {
        "type": "message",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"path": "a"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 1},
    }
    recorder = Recorder([httpx.Response(200, json=message)])
    deltas: list[str] = []
    turn = anthropic(recorder)[0].complete(simple_request(), on_text=deltas.append)
    assert turn.text == "Reading." and deltas == ["Reading."]
    assert [(c.call_id, c.arguments) for c in turn.tool_calls] == [("toolu_9", {"path": "a"})]
    assert turn.stop_reason is StopReason.TOOL_CALLS and turn.anomalies == ()
    assert turn.usage is not None and turn.usage.cache_read_tokens == 1
