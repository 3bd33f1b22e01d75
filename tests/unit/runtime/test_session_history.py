"""A session remembers its earlier runs (issue 10 item 4, DESIGN.md section 8).

Run 2 (started by steering after run 1 sealed) must see the whole history --
run 1's task, its assistant output, every tool call with its result -- then
the new message, under the usual pairing and compaction rules.  Checked on
the request bodies both real adapters send.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.compaction import COMPACTED_PREFIX
from nahida_workers.providers.anthropic import AnthropicProvider
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.testing.validate import (
    validate_anthropic_messages,
    validate_openai_messages,
)
from tests.unit.providers.helpers import Recorder

SSE = {"content-type": "text/event-stream"}
README = "# Widget\n\nA tiny widget library by the Nahida team.\n"


def openai_stream(text: str = "", call: tuple[str, str, dict[str, Any]] | None = None) -> str:
    delta: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call is not None:
        call_id, name, arguments = call
        delta["tool_calls"] = [
            {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    finish = "tool_calls" if call else "stop"
    chunks = [
        {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
    ]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def anthropic_stream(text: str = "", call: tuple[str, str, dict[str, Any]] | None = None) -> str:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"model": "m"}}]
    index = 0
    if text:
        block = {"type": "text", "text": text}
        events += [
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_stop", "index": 0},
        ]
        index = 1
    if call is not None:
        call_id, name, arguments = call
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        events += [
            {"type": "content_block_start", "index": index, "content_block": block},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    stop = "tool_use" if call else "end_turn"
    events += [{"type": "message_delta", "delta": {"stop_reason": stop}}, {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


SHAPES: dict[str, tuple[Callable[..., str], Callable[[Recorder], Any]]] = {
    "openai": (
        openai_stream,
        lambda r: OpenAICompatProvider(base_url="http://o.test/v1", model="m", client=r.client()),
    ),
    "anthropic": (
        anthropic_stream,
        lambda r: AnthropicProvider(base_url="http://a.test", model="m", client=r.client()),
    ),
}


def two_runs(
    shape: str, tmp_path: Path, *, readme: str = README, **spec: Any
) -> tuple[Recorder, Any, str]:
    """Run 1 reads README.md and answers; steering after the seal starts run 2."""
    (tmp_path / "README.md").write_text(readme)
    stream, build = SHAPES[shape]
    read = ("call_r1", "Read", {"path": "README.md"})
    answers = [
        stream("Reading.", read),
        stream("The project is Widget."),
        stream("It was written by the Nahida team."),
    ]
    recorder = Recorder([httpx.Response(200, headers=SSE, text=a) for a in answers])
    runner = memory_runner(provider_for=lambda _spec: build(recorder))
    dispatcher = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock)
    session, _ = dispatcher.submit(
        scripted_spec([{"text": "unused"}], prompt="What is the project called?", **spec),
        workspace=str(tmp_path),
    )
    sid = session.session_id
    runner.run(sid)
    Inbox(runner.ledger, runner.leases, dispatcher, runner.clock).post(
        sid, "And who wrote it, according to the file you read?", next_turn=False
    )
    runner.run(sid)
    return recorder, runner, sid


def _texts(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages)


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_run_two_first_request_holds_run_one(shape: str, tmp_path: Path) -> None:
    recorder, runner, sid = two_runs(shape, tmp_path, tools=("Read",))
    runs = runner.ledger.runs_of(sid)
    assert [r.terminal_state.value for r in runs] == ["completed", "completed"]
    assert len(recorder.requests) == 3
    messages = recorder.bodies()[2]["messages"]
    (validate_openai_messages if shape == "openai" else validate_anthropic_messages)(messages)
    seen = _texts(messages)
    for fact in (
        "What is the project called?",  # run 1's task
        "call_r1",  # the call ...
        "README.md",
        "by the Nahida team",  # ... and its result
        "The project is Widget.",  # run 1's answer
    ):
        assert fact in seen, f"run 2 does not see {fact!r}"
    assert seen.index("What is the project called?") < seen.index("call_r1")
    assert seen.index("The project is Widget.") < seen.index("And who wrote it")
    last = messages[-1]
    assert last["role"] == "user" and "And who wrote it" in json.dumps(last)


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_history_is_compacted_to_the_budget_keeping_pairs(shape: str, tmp_path: Path) -> None:
    big = README + "".join(f"line {n}: {'x' * 80}\n" for n in range(400))  # ~9k tokens
    recorder, _runner, _sid = two_runs(
        shape, tmp_path, readme=big, tools=("Read",), limits={"context_budget_tokens": 2000}
    )
    messages = recorder.bodies()[2]["messages"]
    (validate_openai_messages if shape == "openai" else validate_anthropic_messages)(messages)
    seen = _texts(messages)
    assert "What is the project called?" in seen, "the first task is never dropped"
    assert "And who wrote it" in json.dumps(messages[-1]), "nor the latest input"
    assert COMPACTED_PREFIX in seen
    assert "line 399" not in seen, "the oversized call and result were dropped together"


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_a_later_run_never_sees_the_ledgers_cap_record(shape: str, tmp_path: Path) -> None:
    """Strings the ledger capped (a long reply, a large Write) come back as text, not as a dict."""
    stream, build = SHAPES[shape]
    content = "W" * 300_000  # over the 256 KiB payload cap: the tool_call row holds a cap record
    answers = [
        stream("T" * 300_000, ("call_w1", "Write", {"path": "big.txt", "content": content})),
        stream("Wrote big.txt."),
        stream("It is 300000 bytes."),
    ]
    recorder = Recorder([httpx.Response(200, headers=SSE, text=a) for a in answers])
    runner = memory_runner(provider_for=lambda _spec: build(recorder))
    dispatcher = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock)
    session, _ = dispatcher.submit(
        scripted_spec([{"text": "unused"}], prompt="Write big.txt.", tools=("Write",)),
        workspace=str(tmp_path),
    )
    runner.run(session.session_id)
    Inbox(runner.ledger, runner.leases, dispatcher, runner.clock).post(
        session.session_id, "How large is it?", next_turn=False
    )
    runner.run(session.session_id)
    assert (tmp_path / "big.txt").read_text() == content
    assert len(recorder.requests) == 3
    messages = recorder.bodies()[2]["messages"]
    (validate_openai_messages if shape == "openai" else validate_anthropic_messages)(messages)
    seen = _texts(messages)
    assert "capped" not in seen, "a storage record reached the model"
    assert seen.count("middle omitted") == 2, "the reply and the argument are shown as excerpts"
