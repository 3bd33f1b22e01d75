"""A tool call with no name (or no id) is not a call: it is a provider anomaly (issue 10 item 3).

A call whose name is empty, all whitespace or not a string, or whose id is
missing, cannot be run and cannot even be answered with an error the model
would recognise.  Every parse path (OpenAI streamed and plain body, Anthropic
streamed and plain body) drops it and records a ``malformed_tool_call``
anomaly; a turn left with no parsable call gets one repair turn, then
``failed/provider_protocol_invalid`` -- before this, the call counted, the
model got "unknown tool" every turn and the run ended ``incomplete/doom_loop``
after 16 requests.  A call that names a tool the job does not offer is still
a call: the model gets an error result and can correct itself.

The streamed inputs are the recordings W01 (OpenAI, two parallel calls) and
W09 (Anthropic, two ``tool_use`` blocks) with the names edited; the plain
bodies are synthetic (no recording holds one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.messages import ProviderTurn, ToolCall
from nahida_workers.providers.anthropic import AnthropicProvider
from nahida_workers.providers.anthropic_stream import AnthropicStreamParser, parse_anthropic_message
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.providers.openai_stream import OpenAIStreamParser, parse_openai_completion
from nahida_workers.providers.sse import SSEEvent
from nahida_workers.testing import memory_runner, run_inline, scripted_spec
from nahida_workers.testing.validate import validate_anthropic_messages
from tests.unit.providers.helpers import Recorder, wire

W01_NAMES = ("get_country", "get_product_name")
W09_NAME = "pelican_name_generator"


def edited(wid: str, old: str, new: str, *, count: int = -1) -> str:
    """A recording's body with ``"name":"<old>"`` replaced (``count`` times; -1: all)."""
    sse: str = wire(wid)["sse"]
    needle = f'"name":"{old}"'
    assert needle in sse
    return sse.replace(needle, f'"name":{new}', count)


def events(sse: str) -> list[SSEEvent]:
    out = []
    for frame in sse.split("\n\n"):
        lines = frame.strip().splitlines()
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        kind = [line[6:].strip() for line in lines if line.startswith("event:")]
        if data:
            out.append(SSEEvent(kind[0] if kind else "message", "\n".join(data)))
    return out


def nameless_openai(name: str = '""') -> str:
    sse = edited("W01", W01_NAMES[0], name)
    return sse.replace(f'"name":"{W01_NAMES[1]}"', f'"name":{name}')


def openai_body(calls: list[dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "tool_calls": calls}
    return {"id": "chatcmpl-x", "model": "m", "choices": [
        {"index": 0, "message": message, "finish_reason": "tool_calls"}
    ]}  # fmt: skip


def anthropic_body(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "content": blocks, "stop_reason": "tool_use", "usage": {}}


def fn(call_id: str | None, name: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": "{}"}}
    if call_id is not None:
        call["id"] = call_id
    return call


def tool_use(block_id: Any, name: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "name": name, "input": {"path": "a"}}
    if block_id is not None:
        block["id"] = block_id
    return block


def streamed_openai(sse: str) -> tuple[ProviderTurn, list[ToolCall]]:
    reported: list[ToolCall] = []
    parser = OpenAIStreamParser(on_tool_call=reported.append)
    for event in events(sse):
        parser.feed(event)
    return parser.finish(), reported


def streamed_anthropic(sse: str) -> tuple[ProviderTurn, list[ToolCall]]:
    reported: list[ToolCall] = []
    parser = AnthropicStreamParser(on_tool_call=reported.append)
    for event in events(sse):
        parser.feed(event)
    return parser.finish(), reported


def plain(parse: Any, body: dict[str, Any]) -> tuple[ProviderTurn, list[ToolCall]]:
    reported: list[ToolCall] = []
    return parse(body, on_tool_call=reported.append), reported


def plain_anthropic(block_id: Any, name: Any) -> tuple[ProviderTurn, list[ToolCall]]:
    return plain(parse_anthropic_message, anthropic_body([tool_use(block_id, name)]))


NAMELESS = {
    "openai-stream-empty": lambda: streamed_openai(nameless_openai('""')),
    "openai-stream-blank": lambda: streamed_openai(nameless_openai('"  \\t"')),
    "openai-stream-not-a-string": lambda: streamed_openai(nameless_openai("42")),
    "openai-body-empty": lambda: plain(parse_openai_completion, openai_body([fn("c1", "")])),
    "openai-body-null": lambda: plain(parse_openai_completion, openai_body([fn("c1", None)])),
    "openai-body-no-function": lambda: plain(
        parse_openai_completion, openai_body([{"id": "c1", "type": "function", "function": "x"}])
    ),
    "anthropic-stream-empty": lambda: streamed_anthropic(edited("W09", W09_NAME, '""')),
    "anthropic-stream-not-a-string": lambda: streamed_anthropic(edited("W09", W09_NAME, "7")),
    "anthropic-body-empty": lambda: plain_anthropic("t", ""),
    "anthropic-body-blank": lambda: plain_anthropic("t", " "),
    "anthropic-body-null": lambda: plain_anthropic("t", None),
    "anthropic-body-no-id": lambda: plain_anthropic(None, "Read"),
    "anthropic-body-id-not-a-string": lambda: plain_anthropic(5, "Read"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NAMELESS))
def test_a_call_without_a_name_or_id_is_not_a_call(case: str) -> None:
    turn, reported = NAMELESS[case]()
    assert turn.tool_calls == ()
    assert reported == [], "never reported for a pre-start either"
    codes = {a.code: a.detail for a in turn.anomalies}
    assert codes["malformed_tool_call"]["dropped"] >= 1
    assert codes["finish_reason_mismatch"]["parsed_tool_calls"] == 0


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_only_the_nameless_call_of_a_batch_is_dropped(api: str) -> None:
    if api == "openai":
        turn, reported = streamed_openai(edited("W01", W01_NAMES[0], '""'))
        kept = W01_NAMES[1]
    else:
        turn, reported = streamed_anthropic(edited("W09", W09_NAME, '""', count=1))
        kept = W09_NAME
    assert [c.name for c in turn.tool_calls] == [kept]
    assert reported == list(turn.tool_calls)
    (anomaly,) = [a for a in turn.anomalies if a.code == "malformed_tool_call"]
    assert anomaly.detail["dropped"] == 1
    assert anomaly.detail["calls"][0]["problem"] == "no tool name"


def test_recorded_calls_keep_their_names() -> None:
    turn, _ = streamed_openai(wire("W01")["sse"])
    assert [c.name for c in turn.tool_calls] == list(W01_NAMES)
    assert not turn.anomalies


# -- end to end: the runtime ---------------------------------------------------------------------
SSE = {"content-type": "text/event-stream"}


def response(sse: str) -> httpx.Response:
    return httpx.Response(200, headers=SSE, text=sse)


def answer_openai() -> httpx.Response:
    chunk = {"id": "c", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}
    ]}  # fmt: skip
    return response(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")


def run(tmp_path: Path, provider: Any) -> Any:
    runner = memory_runner(provider_for=lambda _spec: provider)
    spec = scripted_spec([{"text": "unused"}], tools=("Read", "Glob"))
    return run_inline(spec, tmp_path, runner=runner)


def openai(recorder: Recorder) -> OpenAICompatProvider:
    return OpenAICompatProvider(base_url="http://o.test/v1", model="m", client=recorder.client())


def anthropic(recorder: Recorder) -> AnthropicProvider:
    return AnthropicProvider(base_url="http://a.test", model="m", client=recorder.client())


def outcome(result: Any) -> tuple[str, str]:
    return result.terminal["state"], result.terminal["reason"]


def test_nameless_calls_get_one_repair_turn_then_fail(tmp_path: Path) -> None:
    recorder = Recorder([response(nameless_openai())])  # every reply is the same
    result = run(tmp_path, openai(recorder))
    assert outcome(result) == ("failed", "provider_protocol_invalid")
    assert len(recorder.requests) == 2, "one repair turn, not 16 requests to a doom loop"
    assert not [e for e in result.events if e.type is EventType.TOOL_CALL]
    repair = [e for e in result.events if e.payload.get("kind") == "repair"]
    assert [r.payload["anomaly"] for r in repair] == ["malformed_tool_call"]
    assert "no tool name" in recorder.bodies()[1]["messages"][-1]["content"]


def test_text_with_only_a_nameless_call_is_not_an_answer(tmp_path: Path) -> None:
    # Anthropic: "I'll read it" plus a nameless tool_use must not pass as the answer.
    sse = edited("W07", "get_weather", '""').replace('"name":"get_time"', '"name":""')
    assert wire("W07")["expected"]["text"].startswith("Certainly!")
    recorder = Recorder([response(sse)])
    result = run(tmp_path, anthropic(recorder))
    assert outcome(result) == ("failed", "provider_protocol_invalid")
    assert len(recorder.requests) == 2
    repair_request = recorder.bodies()[1]["messages"]
    validate_anthropic_messages(repair_request)  # the text goes back, the dropped calls do not
    assert [b["type"] for b in repair_request[1]["content"]] == ["text"]


def test_a_nameless_call_then_an_answer_completes(tmp_path: Path) -> None:
    recorder = Recorder([response(nameless_openai()), answer_openai()])
    result = run(tmp_path, openai(recorder))
    assert outcome(result) == ("completed", "answer_accepted")
    assert result.terminal["final_text"] == "Done."


def test_a_call_to_a_tool_the_job_does_not_offer_is_an_error_the_model_sees(
    tmp_path: Path,
) -> None:
    recorder = Recorder([response(wire("W01")["sse"]), answer_openai()])
    result = run(tmp_path, openai(recorder))
    assert outcome(result) == ("completed", "answer_accepted")
    results = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert [r.payload["status"] for r in results] == ["error", "error"]
    sent = recorder.bodies()[1]["messages"]
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert len(tool_messages) == 2
    assert all("get_" in m["content"] and "Read" in m["content"] for m in tool_messages)
    assert not [e for e in result.events if e.payload.get("kind") == "repair"]
