"""``on_tool_call``: each tool call reported the moment its arguments are complete.

Streaming pre-start (DESIGN.md section 3): the runtime may start a read-only,
concurrency-safe call before the stream ends, so the provider reports each
client call, in provider order, once, as soon as it is complete and its
arguments parsed into a JSON object.

Timing is observed, not assumed: recordings are served one SSE event per HTTP
chunk from a counting iterator, the callback records how many chunks the
driver had pulled when it fired, and the test derives -- independently, from
the events -- the event that completes each call (OpenAI: the next call's
first fragment, else the ``finish_reason`` / ``[DONE]`` event; Anthropic: the
block's ``content_block_stop``).  A provider that reported only at the end
would fire with every chunk pulled and fail.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nahida_workers.core.messages import ToolCall
from nahida_workers.errors import ProviderError, ProviderProtocolError
from nahida_workers.providers import (
    AnthropicProvider,
    AnthropicStreamParser,
    FallbackProvider,
    OpenAICompatProvider,
    OpenAIStreamParser,
    ScriptedProvider,
    load_script,
    parse_anthropic_message,
    parse_openai_completion,
)
from nahida_workers.providers.early_calls import DedupSink
from nahida_workers.providers.sse import SSEEvent
from tests.unit.providers.helpers import (
    WIRE_IDS,
    Recorder,
    case,
    provider_for_wire,
    recorded_response,
    simple_request,
    sse_body,
    wire,
)

SSE = {"content-type": "text/event-stream"}
OK_IDS = [w for w in WIRE_IDS if wire(w)["status"] == 200]
TIMED_IDS = ["W01", "W02", "W05", "W07", "W09", "W10"]
B08 = case("B08")
B08_VARIANTS = ["sse_main", "sse_variant_missing_index", "sse_control_standard_fragmentation"]


# -- serving one event per chunk, counting what the driver pulled ------------------


class EventBody:
    """A body split after every blank line; ``served`` counts chunks handed out."""

    def __init__(self, body: bytes) -> None:
        self.chunks = [part for part in re.split(rb"(?<=\n\n)", body) if part]
        assert b"".join(self.chunks) == body
        self.served = 0

    def stream(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.served += 1
            yield chunk

    def response(self, headers: Mapping[str, str] = SSE) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=self.stream())

    def data(self) -> list[Any]:
        """Each chunk's parsed ``data`` (``"[DONE]"`` kept as text, None when no data)."""
        out: list[Any] = []
        for chunk in self.chunks:
            lines = [
                line.removeprefix("data:").removeprefix(" ")
                for line in chunk.decode("utf-8").splitlines()
                if line.startswith("data:")
            ]
            text = "\n".join(lines)
            if not lines:
                out.append(None)
            else:
                out.append(text if text.strip() == "[DONE]" else json.loads(text))
        return out


class Log:
    """The callback: records each call with the number of chunks pulled so far."""

    def __init__(self, body: EventBody | None = None) -> None:
        self.body = body
        self.calls: list[ToolCall] = []
        self.at: list[int] = []

    def __call__(self, call: ToolCall) -> None:
        self.calls.append(call)
        self.at.append(self.body.served if self.body is not None else -1)


def openai_completion_events(data: Sequence[Any], ids: Sequence[str]) -> list[int]:
    """Event index completing each call: the next call's first fragment, else the end."""
    first_fragment: dict[str, int] = {}
    terminal: int | None = None
    for n, item in enumerate(data):
        if item == "[DONE]":
            terminal = n if terminal is None else terminal
            continue
        for choice in (item or {}).get("choices") or ():
            for fragment in (choice.get("delta") or {}).get("tool_calls") or ():
                if fragment.get("id"):
                    first_fragment.setdefault(fragment["id"], n)
            if choice.get("finish_reason") and terminal is None:
                terminal = n
    assert terminal is not None
    return [first_fragment[ids[k + 1]] if k + 1 < len(ids) else terminal for k in range(len(ids))]


def anthropic_completion_events(data: Sequence[Any], ids: Sequence[str]) -> list[int]:
    """Event index completing each call: its block's content_block_stop."""
    block_of: dict[str, int] = {}
    stop_at: dict[int, int] = {}
    for n, item in enumerate(data):
        if not isinstance(item, dict):
            continue
        if item["type"] == "content_block_start" and item["content_block"]["type"] == "tool_use":
            block_of[item["content_block"]["id"]] = item["index"]
        elif item["type"] == "content_block_stop":
            stop_at[item["index"]] = n
    return [stop_at[block_of[call_id]] for call_id in ids]


def assert_reported_on_time(log: Log, body: EventBody, completing: Sequence[int]) -> None:
    # Each call fired while the event completing it was processed (chunk n is
    # the (n+1)-th pulled), so strictly before the body's last event.
    assert log.at == [n + 1 for n in completing]
    assert all(at < len(body.chunks) for at in log.at)


# -- the recordings ---------------------------------------------------------------


@pytest.mark.parametrize("wid", TIMED_IDS)
def test_recording_reports_each_call_when_complete(wid: str) -> None:
    w = wire(wid)
    body = EventBody(w["sse"].encode("utf-8"))
    log = Log(body)
    provider = provider_for_wire(w, Recorder([body.response(w["headers"])]).client())
    turn = provider.complete(simple_request(), on_tool_call=log)

    ids = [c["id"] for c in w["expected"]["tool_calls"]]
    assert ids and [c.call_id for c in turn.tool_calls] == ids
    assert log.calls == list(turn.tool_calls)  # exactly the turn's calls, in order
    assert len({c.call_id for c in log.calls}) == len(log.calls)  # each once
    derive = openai_completion_events if w["api"] == "openai-chat" else anthropic_completion_events
    assert_reported_on_time(log, body, derive(body.data(), ids))


def test_two_call_recordings_report_the_first_before_the_second_starts() -> None:
    # The plainest form of "not only at the end": with two calls, the first is
    # reported no later than the event carrying the second call's first fragment
    # (OpenAI) or before the second block starts (Anthropic).
    for wid in ("W01", "W07", "W09"):
        w = wire(wid)
        body = EventBody(w["sse"].encode("utf-8"))
        log = Log(body)
        provider = provider_for_wire(w, Recorder([body.response(w["headers"])]).client())
        provider.complete(simple_request(), on_tool_call=log)
        second = w["expected"]["tool_calls"][1]["id"]
        starts = [n for n, c in enumerate(body.chunks) if second.encode() in c]
        assert len(log.calls) == 2 and log.at[0] <= starts[0] + 1 < log.at[1], wid


@pytest.mark.parametrize("wid", OK_IDS)
def test_every_recording_reports_exactly_its_calls(wid: str) -> None:
    w = wire(wid)
    log = Log()
    turn = provider_for_wire(w, Recorder([recorded_response(w)]).client()).complete(
        simple_request(), on_tool_call=log
    )
    assert log.calls == list(turn.tool_calls)


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(wid=st.sampled_from(TIMED_IDS), data=st.data())
def test_rechunked_recording_reports_the_same_calls(wid: str, data: st.DataObject) -> None:
    w = wire(wid)
    raw = w["sse"].encode("utf-8")
    cuts = sorted(data.draw(st.sets(st.integers(min_value=1, max_value=len(raw) - 1), max_size=40)))
    chunks = [raw[a:b] for a, b in itertools.pairwise([0, *cuts, len(raw)])]
    log = Log()
    provider = provider_for_wire(w, Recorder([recorded_response(w, chunks)]).client())
    turn = provider.complete(simple_request(), on_tool_call=log)
    assert log.calls == list(turn.tool_calls) and turn.tool_calls


# -- B08: same or missing index, and the standard control stream ---------------------


def _openai(recorder: Recorder, **kwargs: Any) -> OpenAICompatProvider:
    return OpenAICompatProvider(
        base_url="http://llm.test/v1", model="m", client=recorder.client(),
        sleep=lambda s: None, **kwargs,
    )  # fmt: skip


def _anthropic(recorder: Recorder, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(
        base_url="http://llm.test", model="c", client=recorder.client(),
        sleep=lambda s: None, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("variant", B08_VARIANTS)
def test_b08_streams_report_both_calls_in_order_on_time(variant: str) -> None:
    body = EventBody(sse_body(B08["input"][variant]))
    log = Log(body)
    turn = _openai(Recorder([body.response()])).complete(simple_request(), on_tool_call=log)
    key = "sse_main" if variant != "sse_control_standard_fragmentation" else variant
    want = B08["expected"]["expected_output"][key]
    assert [(c.call_id, c.name, c.arguments) for c in log.calls] == [
        (w["id"], w["name"], w["arguments"]) for w in want
    ]
    assert log.calls == list(turn.tool_calls)
    ids = [w["id"] for w in want]
    assert_reported_on_time(log, body, openai_completion_events(body.data(), ids))


# -- synthetic streams (hand-written in each documented wire format) ----------------


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"id": "chatcmpl-s", "choices": [choice]})


def frag(index: int, args: str, call_id: str | None = None, name: str = "Read") -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if call_id:
        fragment.update(id=call_id, type="function")
        fragment["function"]["name"] = name
    return {"tool_calls": [fragment]}


def anthropic_body(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def tool_start(index: int, call_id: str, name: str = "Read") -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, partial: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": partial}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MSG_START = {"type": "message_start", "message": {"model": "c", "usage": {"input_tokens": 1}}}
MSG_END = [
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]


@pytest.mark.parametrize("bad", ['{"path": ', "[1, 2]", "not json"])
def test_openai_call_with_invalid_arguments_is_never_reported(bad: str) -> None:
    lines = [
        chunk(frag(0, bad, "call_bad")),
        chunk(frag(1, '{"path": "a"}', "call_ok")),
        chunk({}, "tool_calls"),
        "data: [DONE]",
    ]
    log = Log()
    turn = _openai(Recorder([httpx.Response(200, headers=SSE, content=sse_body(lines))])).complete(
        simple_request(), on_tool_call=log
    )
    assert [c.call_id for c in turn.tool_calls] == ["call_bad", "call_ok"]
    assert turn.tool_calls[0].arguments_error is not None
    assert log.calls == [turn.tool_calls[1]]


def test_anthropic_call_with_invalid_arguments_is_never_reported() -> None:
    body = anthropic_body(
        MSG_START,
        tool_start(0, "toolu_bad"), json_delta(0, '{"path": '), stop(0),
        tool_start(1, "toolu_ok"), json_delta(1, '{"path": "a"}'), stop(1),
        *MSG_END,
    )  # fmt: skip
    log = Log()
    turn = _anthropic(Recorder([httpx.Response(200, headers=SSE, content=body)])).complete(
        simple_request(), on_tool_call=log
    )
    assert turn.tool_calls[0].arguments_error is not None
    assert log.calls == [turn.tool_calls[1]]


CUT_OPENAI = [
    chunk(frag(0, '{"path": "a.md"}', "call_1")),
    chunk(frag(1, '{"pat', "call_2", "Glob")),
    chunk(frag(1, 'tern": "*')),
]


@pytest.mark.parametrize(
    ("cut", "reported"),
    [
        ("after_an_event", ["call_1"]),  # the body ends between two fragments of call_2
        ("inside_a_fragment", ["call_1"]),  # ... inside call_2's second fragment event
        ("inside_call_2_start", []),  # the event starting call_2 is lost: call_1 never sealed
    ],
)
def test_openai_stream_cut_mid_second_call_reports_the_first_then_raises(
    cut: str, reported: list[str]
) -> None:
    body = sse_body(CUT_OPENAI)
    if cut == "inside_a_fragment":
        body = body[: body.rindex(b"tern") + 3]
    elif cut == "inside_call_2_start":
        body = body[: body.index(b"call_2") + 3]
    log = Log()
    recorder = Recorder([httpx.Response(200, headers=SSE, content=body)])
    with pytest.raises(ProviderProtocolError) as info:
        _openai(recorder, max_retries=0).complete(simple_request(), on_tool_call=log)
    assert info.value.retryable
    assert [c.call_id for c in log.calls] == reported
    assert all(c.arguments == {"path": "a.md"} for c in log.calls)


def test_anthropic_stream_cut_mid_second_call_reports_the_first_then_raises() -> None:
    body = anthropic_body(
        MSG_START, tool_start(0, "toolu_1"), json_delta(0, '{"path": "a.md"}'), stop(0),
        tool_start(1, "toolu_2", "Glob"), json_delta(1, '{"pat'),
    )  # fmt: skip
    log = Log()
    recorder = Recorder([httpx.Response(200, headers=SSE, content=body)])
    with pytest.raises(ProviderProtocolError):
        _anthropic(recorder, max_retries=0).complete(simple_request(), on_tool_call=log)
    assert [(c.call_id, c.arguments) for c in log.calls] == [("toolu_1", {"path": "a.md"})]


def test_anthropic_message_stop_without_block_stop_still_cuts_nothing_early() -> None:
    # A tool_use block that never got its stop is reported at message_stop.
    body = anthropic_body(MSG_START, tool_start(0, "toolu_1"), json_delta(0, '{"a": 1}'), *MSG_END)
    log = Log()
    turn = _anthropic(Recorder([httpx.Response(200, headers=SSE, content=body)])).complete(
        simple_request(), on_tool_call=log
    )
    assert log.calls == list(turn.tool_calls) and len(log.calls) == 1


# -- retries: identical calls once, differing calls again ------------------------------


def _full_openai(first_args: str) -> bytes:
    return sse_body(
        [
            chunk(frag(0, first_args, "call_1")),
            chunk(frag(1, '{"pattern": "*"}', "call_2", "Glob")),
            chunk({}, "tool_calls"),
            "data: [DONE]",
        ]
    )


def test_retried_cut_stream_reports_an_identical_call_once() -> None:
    cut = sse_body(CUT_OPENAI)
    recorder = Recorder(
        [
            lambda: httpx.Response(200, headers=SSE, content=cut),
            lambda: httpx.Response(200, headers=SSE, content=cut),
            lambda: httpx.Response(200, headers=SSE, content=_full_openai('{"path":"a.md"}')),
        ]
    )
    log = Log()
    turn = _openai(recorder).complete(simple_request(), on_tool_call=log)
    assert len(recorder.requests) == 3
    # Key order and spacing differ between attempts; the arguments are identical.
    assert [c.call_id for c in log.calls] == ["call_1", "call_2"]
    assert log.calls == list(turn.tool_calls)


def test_retry_with_different_arguments_for_the_same_id_reports_again() -> None:
    recorder = Recorder(
        [
            lambda: httpx.Response(200, headers=SSE, content=sse_body(CUT_OPENAI)),
            lambda: httpx.Response(200, headers=SSE, content=_full_openai('{"path": "b.md"}')),
        ]
    )
    log = Log()
    turn = _openai(recorder).complete(simple_request(), on_tool_call=log)
    assert [(c.call_id, c.arguments) for c in log.calls] == [
        ("call_1", {"path": "a.md"}),
        ("call_1", {"path": "b.md"}),
        ("call_2", {"pattern": "*"}),
    ]
    assert list(turn.tool_calls) == log.calls[1:]


def test_dedup_is_per_complete_call_and_exact() -> None:
    seen: list[ToolCall] = []
    sink = DedupSink(seen.append)
    one = ToolCall(call_id="c", name="Read", arguments={"n": 1})
    for call in (one, ToolCall(call_id="c", name="Read", arguments={"n": 1}), one):
        sink(call)
    sink(ToolCall(call_id="c", name="Read", arguments={"n": 1.0}))  # 1 and 1.0 differ
    sink(ToolCall(call_id="c", name="Read", arguments={"n": True}))  # and true
    sink(ToolCall(call_id="d", name="Read", arguments={"n": 1}))
    assert [(c.call_id, c.arguments) for c in seen] == [
        ("c", {"n": 1}),
        ("c", {"n": 1.0}),
        ("c", {"n": True}),
        ("d", {"n": 1}),
    ]
    # A fresh complete() call starts a fresh sink: the same call is reported again.
    body = _full_openai('{"path": "a.md"}')
    recorder = Recorder([lambda: httpx.Response(200, headers=SSE, content=body)])
    provider = _openai(recorder)
    first, second = Log(), Log()
    provider.complete(simple_request(), on_tool_call=first)
    provider.complete(simple_request(), on_tool_call=second)
    assert first.calls == second.calls and len(first.calls) == 2


# -- parser-level rules ----------------------------------------------------------------


def _feed_openai(parser: OpenAIStreamParser, lines: Sequence[str]) -> None:
    for line in lines:
        parser.feed(SSEEvent("message", line.removeprefix("data: ")))


def test_interleaved_call_without_arguments_yet_is_held_until_it_is_complete() -> None:
    # An interleaving server sends call_1's header, then call_2, then call_1's
    # arguments: call_1 must not be reported as {} when call_2 starts.
    log = Log()
    parser = OpenAIStreamParser(on_tool_call=log)
    _feed_openai(
        parser,
        [
            chunk(frag(0, "", "call_1")),
            chunk(frag(1, '{"pat', "call_2", "Glob")),
            chunk(frag(0, '{"path": "README.md"}')),
            chunk(frag(1, 'tern": "*.py"}')),
        ],
    )
    assert log.calls == []
    _feed_openai(parser, [chunk({}, "tool_calls")])
    assert [(c.call_id, c.arguments) for c in log.calls] == [
        ("call_1", {"path": "README.md"}),
        ("call_2", {"pattern": "*.py"}),
    ]
    _feed_openai(parser, ["data: [DONE]"])
    assert log.calls == list(parser.finish().tool_calls)  # nothing reported twice


def test_calls_without_ids_report_the_ids_the_turn_ends_with() -> None:
    # No completion id and no call ids: the derived id is made once and kept.
    # (The calls are named: a call with no name is not a call at all.)
    log = Log()
    parser = OpenAIStreamParser(on_tool_call=log)
    for n in range(2):
        delta = frag(n, "{}")
        delta["tool_calls"][0]["function"]["name"] = "Read"
        parser.feed_chunk({"choices": [{"index": 0, "delta": delta}]})
    assert len(log.calls) == 1
    parser.feed(SSEEvent("message", "[DONE]"))
    assert log.calls == list(parser.finish().tool_calls)


def test_anthropic_reports_in_index_order_even_if_blocks_stop_out_of_order() -> None:
    log = Log()
    parser = AnthropicStreamParser(on_tool_call=log)
    for event in (tool_start(0, "t0"), tool_start(1, "t1"), json_delta(1, "{}"), stop(1)):
        parser.feed_data(event)
    assert log.calls == []  # t1 waits for t0
    parser.feed_data(stop(0))
    parser.feed_data(stop(0))  # a repeated stop reports nothing twice
    assert [c.call_id for c in log.calls] == ["t0", "t1"]


def test_server_tool_use_is_never_reported() -> None:
    log = Log()
    parser = AnthropicStreamParser(on_tool_call=log)
    block = {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}
    parser.feed_data({"type": "content_block_start", "index": 0, "content_block": block})
    parser.feed_data(stop(0))
    assert log.calls == []


# -- non-streaming bodies ----------------------------------------------------------------


OPENAI_BODY = {
    "id": "chatcmpl-j",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "Read", "arguments": '{"path": "a"}'}},
                    {"id": "c2", "type": "function",
                     "function": {"name": "Read", "arguments": "{oops"}},
                    {"id": "c3", "type": "function",
                     "function": {"name": "Glob", "arguments": '{"pattern": "*"}'}},
                ],
            },
        }
    ],
}  # fmt: skip
ANTHROPIC_BODY = {
    "type": "message",
    "model": "c",
    "stop_reason": "tool_use",
    "content": [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
        {"type": "tool_use", "id": "t2", "name": "Glob", "input": {}},
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def test_non_streaming_bodies_report_every_parsed_call_in_order() -> None:
    log = Log()
    turn = parse_openai_completion(OPENAI_BODY, on_tool_call=log)
    assert [c.call_id for c in log.calls] == ["c1", "c3"]  # c2 did not parse
    assert [c.call_id for c in turn.tool_calls] == ["c1", "c2", "c3"]
    log = Log()
    turn = parse_anthropic_message(ANTHROPIC_BODY, on_tool_call=log)
    assert log.calls == list(turn.tool_calls) and [c.call_id for c in log.calls] == ["t1", "t2"]


def test_json_answer_to_a_stream_request_reports_through_the_adapter() -> None:
    log = Log()
    turn = _openai(Recorder([httpx.Response(200, json=OPENAI_BODY)])).complete(
        simple_request(), on_tool_call=log
    )
    assert [c.call_id for c in log.calls] == ["c1", "c3"] and len(turn.tool_calls) == 3
    log = Log()
    turn = _anthropic(Recorder([httpx.Response(200, json=ANTHROPIC_BODY)])).complete(
        simple_request(), on_tool_call=log
    )
    assert log.calls == list(turn.tool_calls)


# -- scripted and fallback providers -------------------------------------------------------


SCRIPT = load_script(
    {
        "turns": [
            {
                "text": "Looking.",
                "delay_s": 0.5,
                "tool_calls": [
                    {"id": "s1", "name": "Glob", "arguments": {"pattern": "*"}},
                    {"id": "s2", "name": "Read", "raw_arguments": "{broken"},
                    {"id": "s3", "name": "Read", "arguments": {"path": "a"}},
                ],
            },
            {"error": {"status": 500, "message": "down"}},
        ]
    }
)


def test_scripted_provider_reports_its_parsed_calls_after_the_delay() -> None:
    order: list[str] = []
    provider = ScriptedProvider(SCRIPT, sleep=lambda s: order.append(f"sleep {s}"))
    turn = provider.complete(
        simple_request(), on_text=order.append, on_tool_call=lambda c: order.append(c.call_id)
    )
    assert order == ["sleep 0.5", "Looking.", "s1", "s3"]
    assert [c.call_id for c in turn.tool_calls] == ["s1", "s2", "s3"]
    log = Log()
    with pytest.raises(ProviderError):
        provider.complete(simple_request(turn_index=1), on_tool_call=log)
    assert log.calls == []


def test_fallback_passes_the_callback_to_each_provider_tried() -> None:
    # The primary reports call_1 and is then cut off (retries exhausted); the
    # backup's calls follow.  The runtime discards call_1 (epoch bump).
    order: list[str] = []
    primary = _openai(
        Recorder([httpx.Response(200, headers=SSE, content=sse_body(CUT_OPENAI))]), max_retries=0
    )
    backup = ScriptedProvider(SCRIPT, sleep=lambda s: None)
    provider = FallbackProvider(
        [primary, backup], on_fallback=lambda a, b: order.append(f"fallback {a}->{b}")
    )
    turn = provider.complete(simple_request(), on_tool_call=lambda c: order.append(c.call_id))
    assert order == ["call_1", "fallback openai->scripted", "s1", "s3"]
    assert [c.call_id for c in turn.tool_calls] == ["s1", "s2", "s3"]


# -- a raising callback propagates ------------------------------------------------------------


class Boom(Exception):
    pass


def _boom(call: ToolCall) -> None:
    raise Boom(call.call_id)


def test_a_raising_callback_propagates_and_is_not_retried() -> None:
    recorder = Recorder([lambda: httpx.Response(200, headers=SSE, content=_full_openai("{}"))])
    with pytest.raises(Boom, match="call_1"):
        _openai(recorder).complete(simple_request(), on_tool_call=_boom)
    assert len(recorder.requests) == 1
    body = anthropic_body(MSG_START, tool_start(0, "toolu_1"), stop(0), *MSG_END)
    with pytest.raises(Boom, match="toolu_1"):
        _anthropic(Recorder([httpx.Response(200, headers=SSE, content=body)])).complete(
            simple_request(), on_tool_call=_boom
        )
    with pytest.raises(Boom, match="c1"):
        _openai(Recorder([httpx.Response(200, json=OPENAI_BODY)])).complete(
            simple_request(), on_tool_call=_boom
        )
    with pytest.raises(Boom, match="s1"):
        ScriptedProvider(SCRIPT, sleep=lambda s: None).complete(
            simple_request(), on_tool_call=_boom
        )
    backup = ScriptedProvider(SCRIPT, sleep=lambda s: None)
    fallback = FallbackProvider([ScriptedProvider(SCRIPT, sleep=lambda s: None), backup])
    with pytest.raises(Boom):  # not a ProviderError: no fallback either
        fallback.complete(simple_request(), on_tool_call=_boom)
