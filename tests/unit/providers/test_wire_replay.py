"""Every real recording W01-W12, replayed byte-exact through the real adapters.

The `sse` bytes, `status` and `headers` of each recording are served (1) by an
httpx.MockTransport, (2) by a real HTTP server on 127.0.0.1 and (3) re-chunked
at random byte boundaries (hypothesis); the parsed turn must equal the
recording's `expected` (tests/fixtures/wire/README.md) every time.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import Anomaly, ProviderTurn
from nahida_workers.providers import ProviderAPIError
from nahida_workers.providers.http_provider import HTTPProvider
from tests.unit.providers.helpers import (
    KEY,
    WIRE_IDS,
    Recorder,
    byte_server,
    expected_stop,
    expected_usage,
    provider_for_wire,
    recorded_response,
    wire,
)

OK_IDS = [w for w in WIRE_IDS if wire(w)["status"] == 200]
ERROR_IDS = [w for w in WIRE_IDS if wire(w)["status"] != 200]


def assert_matches_expected(w: dict[str, Any], turn: ProviderTurn) -> None:
    expected = w["expected"]
    assert turn.text == expected["text"]
    assert [(c.call_id, c.name, c.arguments) for c in turn.tool_calls] == [
        (c["id"], c["name"], c["arguments"]) for c in expected["tool_calls"]
    ]
    assert all(c.arguments_error is None and c.raw_arguments is None for c in turn.tool_calls)
    stop, raw = expected_stop(expected)
    assert (turn.stop_reason, turn.raw_stop_reason) == (stop, raw)
    assert turn.usage == expected_usage(w["api"], expected["usage"])
    # `done` / `message_stop` is true for every recording: no truncation anomaly.
    assert expected.get("done", expected.get("message_stop")) is True
    claims_tools = raw in ("tool_calls", "tool_use")
    mismatch = bool(expected["tool_calls"]) != claims_tools
    want = (
        (
            Anomaly(
                code="finish_reason_mismatch",
                detail={"finish_reason": raw, "parsed_tool_calls": len(expected["tool_calls"])},
            ),
        )
        if mismatch
        else ()
    )
    assert turn.anomalies == want


def _complete(provider: HTTPProvider) -> tuple[ProviderTurn, list[str]]:
    from tests.unit.providers.helpers import simple_request

    deltas: list[str] = []
    turn = provider.complete(simple_request(), on_text=deltas.append)
    return turn, deltas


@pytest.mark.parametrize("wid", OK_IDS)
def test_recording_replayed_through_mock_transport(wid: str) -> None:
    w = wire(wid)
    recorder = Recorder([recorded_response(w)])
    turn, deltas = _complete(provider_for_wire(w, recorder.client()))
    assert_matches_expected(w, turn)
    assert "".join(deltas) == w["expected"]["text"]
    assert len(recorder.requests) == 1


def test_w05_forced_call_with_finish_stop_is_still_a_call() -> None:
    # W05: a complete call but finish_reason "stop" -> classified by what was parsed.
    w = wire("W05")
    turn, _ = _complete(provider_for_wire(w, Recorder([recorded_response(w)]).client()))
    assert turn.stop_reason.value == "tool_calls"
    assert turn.anomalies[0].detail == {"finish_reason": "stop", "parsed_tool_calls": 1}


@pytest.mark.parametrize("wid", WIRE_IDS)
def test_recording_replayed_through_a_real_local_server(wid: str) -> None:
    w = wire(wid)
    with (
        byte_server(w["status"], w["headers"], w["sse"].encode("utf-8")) as base,
        httpx.Client() as client,
    ):
        provider = provider_for_wire(w, client, base)
        if w["status"] == 200:
            turn, _ = _complete(provider)
            assert_matches_expected(w, turn)
        else:
            with pytest.raises(ProviderAPIError) as info:
                _complete(provider)
            assert info.value.error_body == w["expected"]["error"]


@pytest.mark.parametrize("wid", ERROR_IDS)
def test_error_recording_gives_the_typed_error(wid: str) -> None:
    # W06 (OpenAI 404 model_not_found), W12 (Anthropic 404 + x-should-retry: false):
    # a JSON body to a stream request, not retried, no credential in the message.
    w = wire(wid)
    recorder = Recorder([recorded_response(w)])
    provider = provider_for_wire(w, recorder.client())
    with pytest.raises(ProviderAPIError) as info:
        _complete(provider)
    exc = info.value
    assert exc.error_body == w["expected"]["error"]
    assert exc.retryable is False
    assert exc.status == 404
    assert exc.failure_code is FailureCode.PROVIDER_NOT_FOUND
    assert exc.error_type == w["expected"]["error"]["type"]
    assert len(recorder.requests) == 1
    assert KEY not in str(exc) and KEY not in repr(exc)
    assert w["expected"]["error"]["message"] not in str(exc)  # raw body text stays out


@pytest.mark.parametrize("wid", OK_IDS)
def test_recording_one_byte_per_chunk(wid: str) -> None:
    w = wire(wid)
    body = w["sse"].encode("utf-8")
    chunks = [body[i : i + 1] for i in range(len(body))]
    turn, deltas = _complete(
        provider_for_wire(w, Recorder([recorded_response(w, chunks)]).client())
    )
    assert_matches_expected(w, turn)
    assert "".join(deltas) == w["expected"]["text"]


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(wid=st.sampled_from(OK_IDS), data=st.data())
def test_recording_rechunked_at_random_byte_boundaries(wid: str, data: st.DataObject) -> None:
    w = wire(wid)
    body = w["sse"].encode("utf-8")
    cuts = sorted(
        data.draw(st.sets(st.integers(min_value=1, max_value=len(body) - 1), max_size=40))
    )
    bounds = [0, *cuts, len(body)]
    chunks = [body[a:b] for a, b in itertools.pairwise(bounds)]
    turn, _ = _complete(provider_for_wire(w, Recorder([recorded_response(w, chunks)]).client()))
    assert_matches_expected(w, turn)


def test_recordings_cover_both_apis_and_errors() -> None:
    assert {wire(w)["api"] for w in OK_IDS} == {"openai-chat", "anthropic-messages"}
    assert ERROR_IDS == ["W06", "W12"]


@pytest.mark.parametrize("wid", ["W08", "W11"])
def test_a_paused_turn_keeps_the_recorded_content_blocks_exactly(wid: str) -> None:
    # Synthetic edit of a real recording: its stop_reason replaced by
    # "pause_turn" (no recording has one), so the adapter keeps the raw blocks
    # to send back.  They must equal the recording's `expected.content_blocks`
    # (W08: the thinking block with its signature, then the text; W11: text).
    w = wire(wid)
    raw = w["expected"]["stop_reason"]
    edited = w["sse"].replace(f'"stop_reason":"{raw}"', '"stop_reason":"pause_turn"')
    assert edited != w["sse"]
    w = {**w, "sse": edited}
    turn, _ = _complete(provider_for_wire(w, Recorder([recorded_response(w)]).client()))
    assert turn.raw_stop_reason == "pause_turn"
    want = [{k: v for k, v in b.items() if k != "index"} for b in w["expected"]["content_blocks"]]
    assert [dict(b) for b in turn.content_blocks] == want
