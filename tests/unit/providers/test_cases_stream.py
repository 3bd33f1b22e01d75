"""Bug-report cases B08 and B09 through the real OpenAI-compatible adapter."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from nahida_workers.core.messages import Anomaly, ProviderTurn, StopReason, ToolChoice, ToolSchema
from nahida_workers.providers import OpenAICompatProvider
from nahida_workers.providers.openai_stream import parse_openai_completion
from tests.unit.providers.helpers import Recorder, case, simple_request, sse_body

B08 = case("B08")
B09 = case("B09")
SSE = {"content-type": "text/event-stream"}


def _run(response: httpx.Response, **request: Any) -> tuple[ProviderTurn, Recorder]:
    recorder = Recorder([response])
    provider = OpenAICompatProvider(
        base_url="http://llm.test/v1", model="m", client=recorder.client(), sleep=lambda s: None
    )
    return provider.complete(simple_request(**request)), recorder


@pytest.mark.parametrize("variant", ["sse_main", "sse_variant_missing_index"])
def test_b08_same_or_missing_index_gives_two_calls(variant: str) -> None:
    # Rule: a non-empty id different from the one held at the index starts a new
    # call; a missing index counts as the current slot.
    turn, _ = _run(httpx.Response(200, headers=SSE, content=sse_body(B08["input"][variant])))
    expected = B08["expected"]["expected_output"]["sse_main"]
    assert [c.call_id for c in turn.tool_calls] == ["call_a1", "call_b2"]
    for call, want in zip(turn.tool_calls, expected, strict=True):
        assert call.arguments_error is None  # each call's text passed json.loads alone
        assert (call.call_id, call.name, call.arguments) == (
            want["id"],
            want["name"],
            want["arguments"],
        )
    assert turn.stop_reason is StopReason.TOOL_CALLS
    assert turn.anomalies == ()


def test_b08_control_stream_standard_fragmentation_still_works() -> None:
    lines = B08["input"]["sse_control_standard_fragmentation"]
    turn, _ = _run(httpx.Response(200, headers=SSE, content=sse_body(lines)))
    expected = B08["expected"]["expected_output"]["sse_control_standard_fragmentation"]
    assert [(c.call_id, c.name, c.arguments) for c in turn.tool_calls] == [
        (w["id"], w["name"], w["arguments"]) for w in expected
    ]


def _b09_request() -> dict[str, object]:
    tool = B09["input"]["request"]["tools"][0]["function"]
    return {
        "tool_choice": ToolChoice.REQUIRED,
        "tools": (ToolSchema(name=tool["name"], description=tool["description"],
                             input_schema=tool["parameters"]),),
    }  # fmt: skip


B09_ANOMALY = Anomaly(
    code="finish_reason_mismatch", detail={"finish_reason": "tool_calls", "parsed_tool_calls": 0}
)


@pytest.mark.parametrize("variant", ["variant_stream", "variant_nonstream_response"])
def test_b09_finish_tool_calls_with_nothing_parsed(variant: str) -> None:
    data = B09["input"][variant]
    if variant == "variant_stream":
        response = httpx.Response(200, headers=SSE, content=sse_body(data))
    else:  # a server that ignored stream=true and answered application/json
        response = httpx.Response(200, json=data)
    turn, recorder = _run(response, **_b09_request())
    assert turn.tool_calls == ()
    assert turn.text == "I'm doing well, thanks for asking!"
    assert turn.stop_reason is StopReason.END_TURN
    assert turn.raw_stop_reason == "tool_calls"
    assert turn.anomalies == (B09_ANOMALY,)
    assert len(recorder.requests) == 1  # no automatic re-call with the same history
    sent = recorder.bodies()[0]
    assert sent["tool_choice"] == "required"
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]


def test_b09_nonstream_parser_directly() -> None:
    turn = parse_openai_completion(B09["input"]["variant_nonstream_response"])
    assert (turn.tool_calls, turn.anomalies) == ((), (B09_ANOMALY,))


def test_b09_mirror_call_with_finish_stop_is_one_call() -> None:
    lines = B09["input"]["variant_mirror_stream"]
    turn, recorder = _run(httpx.Response(200, headers=SSE, content=sse_body(lines)))
    assert [(c.call_id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_w1", "get_weather", {"city": "Oslo"})
    ]
    assert turn.stop_reason is StopReason.TOOL_CALLS
    assert turn.anomalies == (
        Anomaly(
            code="finish_reason_mismatch", detail={"finish_reason": "stop", "parsed_tool_calls": 1}
        ),
    )
    assert len(recorder.requests) == 1


def test_b08_lines_are_valid_json_events() -> None:
    for line in B08["input"]["sse_main"][:-1]:
        json.loads(line.removeprefix("data: "))
