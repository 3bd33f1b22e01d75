"""Case B09 through the whole loop: the real OpenAI adapter, the runtime, the ledger.

vLLM answered ``finish_reason: tool_calls`` with no parsable call.  The turn is
classified by what was parsed: no tool runs and the ledger records the
anomaly.  Issue 23 item 4 (which wins over the case's "would end completed"):
the reply's text is not a candidate answer -- one repair turn, then
``failed``; a plain answer after the repair is judged as usual
(``unverified`` when the request required a tool, ``completed`` with
``auto``), so the run never fails on the first anomaly.  The mirror variant
(a call with ``finish_reason: stop``) runs the call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.core.events import EventType
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.testing import memory_runner, run_inline, scripted_spec
from tests.conftest import load_case

CASE = load_case("B09")
FINAL = [
    'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
    '"delta":{"content":"Oslo is sunny."},"finish_reason":"stop"}]}',
    "data: [DONE]",
]


def _provider(streams: list[list[str]], requests: list[dict[str, Any]]) -> OpenAICompatProvider:
    def handle(request: httpx.Request) -> httpx.Response:
        import json

        requests.append(json.loads(request.content))
        lines = streams[min(len(requests), len(streams)) - 1]
        body = "\n\n".join(lines) + "\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    return OpenAICompatProvider(base_url="http://vllm.test/v1", model="m", client=client)


@pytest.mark.parametrize(
    ("tool_choice", "state"), [("required", "unverified"), ("auto", "completed")]
)
def test_finish_reason_tool_calls_with_nothing_parsed(
    tool_choice: str, state: str, tmp_path: Path
) -> None:
    """Issue 23 item 4: the text of a tool finish with no call is not a candidate answer.

    One repair turn (a new user message: never the same history again); the
    repaired plain answer is then judged as usual.
    """
    requests: list[dict[str, Any]] = []
    provider = _provider([CASE["input"]["variant_stream"], FINAL], requests)
    runner = memory_runner(provider_for=lambda _spec: provider)
    spec = scripted_spec([{"text": "unused"}], tool_choice=tool_choice, tools=("Read",))
    result = run_inline(spec, tmp_path, runner=runner)
    assert len(requests) == 2
    assert requests[0]["tool_choice"] == tool_choice
    first, second = (r["messages"] for r in requests)
    assert second[: len(first)] == first, "the repair turn extends the same prefix"
    assert second[-1]["role"] == "user" and "could be parsed" in second[-1]["content"]
    kinds = [e.type for e in result.events]
    assert EventType.TOOL_CALL not in kinds
    anomaly = next(e for e in result.events if e.type is EventType.PROVIDER_ANOMALY)
    assert anomaly.payload["code"] == "finish_reason_mismatch"
    assert anomaly.payload["detail"] == {"finish_reason": "tool_calls", "parsed_tool_calls": 0}
    output = next(e for e in result.events if e.type is EventType.ASSISTANT_OUTPUT)
    assert output.payload["text"] == "I'm doing well, thanks for asking!"
    (repair,) = [
        e.payload
        for e in result.events
        if e.type is EventType.CONTROL and e.payload.get("kind") == "repair"
    ]
    assert repair["anomaly"] == "text_tool_turn"
    assert result.run.terminal_state.value == state


def test_a_second_tool_finish_with_nothing_parsed_fails(tmp_path: Path) -> None:
    """Repair once, then ``failed/provider_protocol_invalid`` -- never a candidate answer."""
    requests: list[dict[str, Any]] = []
    provider = _provider([CASE["input"]["variant_stream"]], requests)
    runner = memory_runner(provider_for=lambda _spec: provider)
    spec = scripted_spec([{"text": "unused"}], tools=("Read",))
    result = run_inline(spec, tmp_path, runner=runner)
    assert len(requests) == 2
    assert result.run.terminal_state.value == "failed"
    assert result.run.terminal_reason is not None
    assert result.run.terminal_reason.value == "provider_protocol_invalid"
    assert "doing well" not in str(result.events[-1].payload["final_text"])


def test_the_mirror_variant_runs_the_parsed_call(tmp_path: Path) -> None:
    (tmp_path / "weather.txt").write_text("Oslo: sunny\n")
    mirror = [
        line.replace("get_weather", "Read").replace(
            '{\\"city\\":\\"Oslo\\"}', '{\\"path\\":\\"weather.txt\\"}'
        )
        for line in CASE["input"]["variant_mirror_stream"]
    ]
    requests: list[dict[str, Any]] = []
    provider = _provider([mirror, FINAL], requests)
    runner = memory_runner(provider_for=lambda _spec: provider)
    result = run_inline(
        scripted_spec([{"text": "unused"}], tools=("Read",)), tmp_path, runner=runner
    )
    calls = [e for e in result.events if e.type is EventType.TOOL_CALL]
    assert [c.call_id for c in calls] == ["call_w1"]
    (res,) = [e for e in result.events if e.type is EventType.TOOL_RESULT]
    assert res.payload["status"] == "ok" and "Oslo: sunny" in res.payload["content"]
    assert len(requests) == 2
    assert result.run.terminal_state.value == "completed"
