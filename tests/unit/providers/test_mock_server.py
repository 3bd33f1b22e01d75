"""The OpenAI-compatible mock server over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import (
    AssistantMessage,
    Message,
    ProviderRequest,
    ProviderTurn,
    ToolResultMessage,
    UserMessage,
)
from nahida_workers.providers import (
    OpenAICompatProvider,
    ProviderAPIError,
    ScriptedProvider,
    load_script,
)
from nahida_workers.testing.mock_server import MockLLMServer, serve_mock_llm

SURVEY = {
    "turns": [
        {
            "text": "Surveying the repository.",
            "tool_calls": [
                {"id": "c1", "name": "Glob", "arguments": {"pattern": "**/*.md"}},
                {"id": "c2", "name": "Bash", "arguments": {"command": "git log --oneline -5"}},
            ],
            "usage": {"input_tokens": 120, "output_tokens": 30},
        },
        {
            "tool_calls": [
                {"id": "c3", "name": "Read", "arguments": {"path": "${result:c1:line:0}"}}
            ],
        },
        {"text": "The repository is a demo with a README."},
    ]
}


@pytest.fixture
def server() -> Iterator[MockLLMServer]:
    with serve_mock_llm(SURVEY) as srv:
        yield srv


def provider_for(srv: MockLLMServer, **kwargs: Any) -> OpenAICompatProvider:
    kwargs.setdefault("sleep", lambda s: None)
    return OpenAICompatProvider(base_url=srv.url, model="scripted", **kwargs)


def request(*messages: Message) -> ProviderRequest:
    turns = sum(isinstance(m, AssistantMessage) for m in messages)
    return ProviderRequest(run_id="r", turn_index=turns, messages=messages)


def comparable(turn: ProviderTurn) -> tuple[Any, ...]:
    return turn.text, turn.tool_calls, turn.stop_reason


def test_survey_script_over_http_equals_the_scripted_provider(server: MockLLMServer) -> None:
    scripted = ScriptedProvider(load_script(SURVEY))
    provider = provider_for(server)
    history: list[Message] = [UserMessage(text="Survey this repository.")]
    turns = []
    for _ in range(3):
        req = request(*history)
        deltas: list[str] = []
        turn = provider.complete(req, on_text=deltas.append)
        assert comparable(turn) == comparable(scripted.complete(req))
        assert "".join(deltas) == turn.text
        turns.append(turn)
        history.append(AssistantMessage(text=turn.text, tool_calls=turn.tool_calls))
        outputs = {"c1": "README.md\ndocs/guide.md", "c2": "abc123 init", "c3": "# Demo"}
        history.extend(
            ToolResultMessage(call_id=c.call_id, name=c.name, content=outputs[c.call_id])
            for c in turn.tool_calls
        )
    assert [c.call_id for c in turns[0].tool_calls] == ["c1", "c2"]
    assert turns[1].tool_calls[0].arguments == {"path": "README.md"}  # ${result:c1:line:0}
    assert turns[2].text == "The repository is a demo with a README." and not turns[2].tool_calls
    assert turns[0].usage is not None and turns[0].usage.input_tokens == 120
    assert len(server.requests) == 3
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "tool",
    ]


def test_stream_is_real_openai_format(server: MockLLMServer) -> None:
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = httpx.post(f"{server.url}/chat/completions", json=body).text
    events = [line.removeprefix("data: ") for line in raw.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 120
    fragments: dict[int, list[str]] = {}
    for c in chunks[:-1]:
        for t in c["choices"][0]["delta"].get("tool_calls", []):
            fragments.setdefault(t["index"], []).append(t["function"]["arguments"])
    assert all(len([f for f in parts if f]) >= 2 for parts in fragments.values())
    assert json.loads("".join(fragments[0])) == {"pattern": "**/*.md"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_streaming_request_gets_a_chat_completion(server: MockLLMServer) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "go"}]}
    reply = httpx.post(f"{server.url}/chat/completions", json=body).json()
    assert reply["object"] == "chat.completion"
    assert [c["id"] for c in reply["choices"][0]["message"]["tool_calls"]] == ["c1", "c2"]


def test_models_endpoint(server: MockLLMServer) -> None:
    assert httpx.get(f"{server.url}/models").json()["data"][0]["id"] == "scripted"


def test_error_turn_gives_the_typed_error_with_retry_after() -> None:
    script = {"turns": [{"error": {"status": 429, "message": "slow down", "retry_after": 1.5}}]}
    sleeps: list[float] = []
    with serve_mock_llm(script) as srv:
        provider = provider_for(srv, max_retries=1, sleep=sleeps.append)
        with pytest.raises(ProviderAPIError) as info:
            provider.complete(request(UserMessage(text="hi")))
        assert len(srv.requests) == 2  # retried once (the script serves the same turn again)
    exc = info.value
    assert (exc.status, exc.retryable, exc.retry_after) == (429, True, 1.5)
    assert exc.failure_code is FailureCode.PROVIDER_RATE_LIMITED
    assert exc.error_body is not None and exc.error_body["message"] == "slow down"
    assert sleeps and sleeps[0] >= 1.5


def test_script_exhausted_is_a_non_retryable_error(server: MockLLMServer) -> None:
    history: list[Message] = [UserMessage(text="x")]
    history += [AssistantMessage(text=f"t{n}") for n in range(3)]
    with pytest.raises(ProviderAPIError) as info:
        provider_for(server).complete(request(*history))
    assert info.value.retryable is False and info.value.status == 400
    assert info.value.failure_code is FailureCode.SCRIPT_EXHAUSTED
    assert len(server.requests) == 1


def test_close_is_idempotent_and_frees_the_port() -> None:
    srv = serve_mock_llm({"turns": [{"text": "hi"}]})
    url = srv.url
    srv.close()
    srv.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=1)


def test_a_later_run_with_the_earlier_runs_history_gets_its_own_turns() -> None:
    """Run 2's request holds run 1's messages: its turns are counted after run 1's."""
    script = {"turns": [{"text": "First run's answer."}], "next_runs": [[{"text": "Second."}]]}
    with serve_mock_llm(script) as srv:
        provider = provider_for(srv)
        first = provider.complete(request(UserMessage(text="Task one.")))
        second = provider.complete(
            request(
                UserMessage(text="Task one."),
                AssistantMessage(text=first.text),
                UserMessage(text="Now task two."),
            )
        )
    assert (first.text, second.text) == ("First run's answer.", "Second.")
