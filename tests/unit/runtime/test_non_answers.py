"""Provider outcomes that are not answers are never ``completed`` (issue 10 item 3).

Through the real adapters, the runtime and the ledger.  The refusal, empty
tool-finish and pause_turn streams are SYNTHETIC: no recording in
tests/fixtures/wire has them (its README lists what it holds); they are
hand-written in each API's documented wire format.  The recordings still
classify as before (last test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.messages import StopReason
from nahida_workers.providers.anthropic import AnthropicProvider
from nahida_workers.providers.anthropic_stream import parse_anthropic_message
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.providers.openai_stream import parse_openai_completion
from nahida_workers.testing import memory_runner, run_inline, scripted_spec
from nahida_workers.testing.validate import validate_anthropic_messages
from tests.unit.providers.helpers import (
    WIRE_IDS,
    Recorder,
    provider_for_wire,
    simple_request,
    wire,
)

SSE = {"content-type": "text/event-stream"}


def oa(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"id": "chatcmpl-n", "model": "m", "choices": [choice]})


def an(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}"


def body(lines: list[str]) -> httpx.Response:
    return httpx.Response(200, headers=SSE, text="\n\n".join(lines) + "\n\n")


OPENAI_REFUSAL = [
    oa({"role": "assistant", "content": None, "refusal": ""}),
    oa({"refusal": "I'm sorry, "}),
    oa({"refusal": "I can't help with that."}),
    oa({}, "stop"),
    "data: [DONE]",
]
OPENAI_EMPTY_TOOL_FINISH = [oa({"role": "assistant", "content": None}), oa({}, "tool_calls")]
OPENAI_ANSWER = [oa({"content": "Oslo is sunny."}), oa({}, "stop"), "data: [DONE]"]


def anthropic_stream(blocks: list[dict[str, Any]], stop: str) -> list[str]:
    lines = [an("message_start", {"message": {"model": "claude-x", "usage": {"input_tokens": 9}}})]
    for index, block in enumerate(blocks):
        start = dict(block)
        deltas: list[dict[str, Any]] = []
        if block["type"] == "text":
            start["text"] = ""
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif block["type"] in ("server_tool_use", "tool_use"):
            start["input"] = {}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        lines.append(an("content_block_start", {"index": index, "content_block": start}))
        lines += [an("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        lines.append(an("content_block_stop", {"index": index}))
    lines.append(
        an("message_delta", {"delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}})
    )
    lines.append(an("message_stop", {}))
    return lines


PAUSED_BLOCKS = [
    {"type": "text", "text": "Searching the web."},
    {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "Oslo weather"},
    },
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [{"type": "web_search_result", "url": "https://w.test", "title": "Oslo"}],
    },
]


def openai(recorder: Recorder) -> OpenAICompatProvider:
    return OpenAICompatProvider(base_url="http://o.test/v1", model="m", client=recorder.client())


def anthropic(recorder: Recorder) -> AnthropicProvider:
    return AnthropicProvider(base_url="http://a.test", model="m", client=recorder.client())


def run(tmp_path: Path, provider: Any, **spec: Any) -> Any:
    runner = memory_runner(provider_for=lambda _spec: provider)
    return run_inline(scripted_spec([{"text": "unused"}], **spec), tmp_path, runner=runner)


def outcome(result: Any) -> tuple[str, str]:
    return result.terminal["state"], result.terminal["reason"]


# -- refusal ---------------------------------------------------------------------------------
def test_openai_streamed_refusal_is_recorded_and_ends_refused(tmp_path: Path) -> None:
    recorder = Recorder([body(OPENAI_REFUSAL)])
    result = run(tmp_path, openai(recorder))
    assert outcome(result) == ("incomplete", "refused")
    (turn,) = [e for e in result.events if e.type is EventType.ASSISTANT_OUTPUT]
    assert turn.payload["stop_reason"] == "refusal"
    assert turn.payload["refusal"] == "I'm sorry, I can't help with that."
    assert "declined" in result.terminal["final_text"]
    assert "sorry" not in result.terminal["final_text"]  # the runtime writes it, not the model
    assert len(recorder.requests) == 1


def test_openai_message_refusal_in_a_plain_body() -> None:
    turn = parse_openai_completion(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "refusal": "No."},
                    "finish_reason": "stop",
                }
            ]
        }
    )
    assert (turn.stop_reason, turn.refusal, turn.text) == (StopReason.REFUSAL, "No.", "")


@pytest.mark.parametrize("contract", [{}, {"evidence": "observe"}, {"required_tools": ["Read"]}])
def test_anthropic_stop_reason_refusal_is_never_completed(
    contract: dict[str, Any], tmp_path: Path
) -> None:
    stream = anthropic_stream([{"type": "text", "text": "I can't help with that."}], "refusal")
    result = run(tmp_path, anthropic(Recorder([body(stream)])), contract=contract)
    assert outcome(result) == ("incomplete", "refused")
    turn = next(e for e in result.events if e.type is EventType.ASSISTANT_OUTPUT)
    assert (turn.payload["stop_reason"], turn.payload["raw_stop_reason"]) == ("refusal", "refusal")


def test_a_content_filtered_reply_is_not_an_answer(tmp_path: Path) -> None:
    stream = [oa({"content": "Here is how to"}), oa({}, "content_filter"), "data: [DONE]"]
    result = run(tmp_path, openai(Recorder([body(stream)])))
    assert outcome(result) == ("incomplete", "content_filtered")


# -- a tool-call finish with nothing in it -----------------------------------------------------
def test_empty_tool_finish_gets_one_repair_turn_then_fails(tmp_path: Path) -> None:
    recorder = Recorder([body(OPENAI_EMPTY_TOOL_FINISH)])  # every answer is the same
    result = run(tmp_path, openai(recorder), tools=("Read",))
    assert outcome(result) == ("failed", "provider_protocol_invalid")
    assert result.run.failure_code.value == "provider_protocol_invalid"
    assert len(recorder.requests) == 2, "one repair turn, then give up"
    repair = [e for e in result.events if e.payload.get("kind") == "repair"]
    assert len(repair) == 1 and repair[0].payload["anomaly"] == "empty_tool_turn"
    anomalies = [e for e in result.events if e.type is EventType.PROVIDER_ANOMALY]
    assert len(anomalies) == 2
    assert all(a.payload["detail"]["parsed_tool_calls"] == 0 for a in anomalies)
    # the repair message reached the model, after its empty turn
    assert "tool-call finish" in recorder.bodies()[1]["messages"][-1]["content"]


def test_an_empty_tool_finish_then_an_answer_completes(tmp_path: Path) -> None:
    recorder = Recorder([body(OPENAI_EMPTY_TOOL_FINISH), body(OPENAI_ANSWER)])
    result = run(tmp_path, openai(recorder), tools=("Read",))
    assert outcome(result) == ("completed", "answer_accepted")
    assert result.terminal["final_text"] == "Oslo is sunny."


# -- a tool-call finish with text and no call (docs/concepts/context.md) ------------------------
ANTHROPIC_TEXT_TOOL_FINISH = anthropic_stream(
    [{"type": "text", "text": "I'll look that up for you."}], "tool_use"
)
ANTHROPIC_ANSWER = anthropic_stream([{"type": "text", "text": "Oslo is sunny."}], "end_turn")


def test_anthropic_tool_use_stop_with_text_and_no_call_is_repaired_then_fails(
    tmp_path: Path,
) -> None:
    """SYNTHETIC stream: ``stop_reason: tool_use`` with only a text block."""
    recorder = Recorder([body(ANTHROPIC_TEXT_TOOL_FINISH)])
    result = run(tmp_path, anthropic(recorder), tools=("Read",))
    assert outcome(result) == ("failed", "provider_protocol_invalid")
    assert len(recorder.requests) == 2, "one repair turn, then give up"
    (first, _second) = [e for e in result.events if e.type is EventType.ASSISTANT_OUTPUT]
    assert first.payload["text"] == "I'll look that up for you."  # committed, not an answer
    assert first.payload["raw_stop_reason"] == "tool_use"
    repair = [e for e in result.events if e.payload.get("kind") == "repair"]
    assert len(repair) == 1 and repair[0].payload["anomaly"] == "text_tool_turn"
    sent = recorder.bodies()[1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": [
        {"type": "text", "text": "I'll look that up for you."}
    ]}  # fmt: skip
    assert "no tool call in it could be parsed" in sent[-1]["content"]
    assert "look that up" not in result.terminal["final_text"]


def test_anthropic_tool_use_stop_with_text_then_an_answer_completes(tmp_path: Path) -> None:
    recorder = Recorder([body(ANTHROPIC_TEXT_TOOL_FINISH), body(ANTHROPIC_ANSWER)])
    result = run(tmp_path, anthropic(recorder), tools=("Read",))
    assert outcome(result) == ("completed", "answer_accepted")
    assert result.terminal["final_text"] == "Oslo is sunny."


# -- an empty answer -------------------------------------------------------------------------
def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]}


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize(
    ("contract", "first"),
    [
        ({}, []),
        ({"evidence": "observe"}, [call("g", "Glob", {"pattern": "*"})]),
        ({"output_schema": SCHEMA}, [call("s", "StructuredOutput", {"n": 1})]),
    ],
    ids=["no-contract", "observe", "structured-output"],
)  # fmt: skip
def test_an_empty_answer_is_never_completed(
    contract: dict[str, Any], first: list[dict[str, Any]], tmp_path: Path
) -> None:
    spec = scripted_spec([*first, {"text": ""}, {"text": "  \n"}], contract=contract)
    result = run_inline(spec, tmp_path)
    assert outcome(result) == ("incomplete", "empty_answer")
    corrections = [e for e in result.events if e.payload.get("stage") == "empty_answer"]
    assert len(corrections) == 1


def test_an_empty_answer_corrected_completes(tmp_path: Path) -> None:
    result = run_inline(scripted_spec([{"text": ""}, {"text": "Four."}]), tmp_path)
    assert outcome(result) == ("completed", "answer_accepted")
    assert result.terminal["final_text"] == "Four."


# -- pause_turn ------------------------------------------------------------------------------
def test_pause_turn_continues_the_same_turn_with_the_paused_content(tmp_path: Path) -> None:
    paused = anthropic_stream(PAUSED_BLOCKS, "pause_turn")
    final = anthropic_stream([{"type": "text", "text": "Oslo is sunny today."}], "end_turn")
    recorder = Recorder([body(paused), body(final)])
    result = run(tmp_path, anthropic(recorder))
    assert outcome(result) == ("completed", "answer_accepted")
    assert result.terminal["final_text"] == "Oslo is sunny today."
    assert not [e for e in result.events if e.type is EventType.CONTROL]  # never judged
    second = recorder.bodies()[1]["messages"]
    validate_anthropic_messages(second)
    assert second[-1]["role"] == "assistant"
    assert second[-1]["content"] == PAUSED_BLOCKS, "the paused content goes back as sent"


def test_a_paused_non_stream_body_keeps_its_blocks() -> None:
    turn = parse_anthropic_message(
        {"model": "m", "content": PAUSED_BLOCKS, "stop_reason": "pause_turn", "usage": {}}
    )
    assert turn.stop_reason is StopReason.PAUSE_TURN
    assert [dict(b) for b in turn.content_blocks] == PAUSED_BLOCKS
    assert turn.tool_calls == ()  # server tools are never client calls


@pytest.mark.parametrize("wid", [w for w in WIRE_IDS if w not in ("W06", "W12")])
def test_recorded_streams_keep_their_classification(wid: str) -> None:
    w = wire(wid)
    recorded = httpx.Response(200, headers=w["headers"], text=w["sse"])
    turn = provider_for_wire(w, Recorder([recorded]).client()).complete(simple_request())
    assert turn.refusal is None and turn.content_blocks == ()
    assert turn.stop_reason in (StopReason.TOOL_CALLS, StopReason.END_TURN, StopReason.MAX_TOKENS)
