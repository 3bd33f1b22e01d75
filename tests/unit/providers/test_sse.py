"""The incremental SSE decoder (WHATWG "Interpreting an event stream")."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.providers.sse import SSEDecoder, SSEEvent


def decode(chunks: list[bytes] | list[str]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


def test_event_and_multi_line_data_and_comments() -> None:
    body = ": keep-alive\nevent: message_start\ndata: a\ndata: b\n\ndata: c\n\n"
    assert decode([body]) == [SSEEvent("message_start", "a\nb"), SSEEvent("message", "c")]


def test_line_endings_crlf_cr_lf_mixed() -> None:
    body = "data: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"
    assert [e.data for e in decode([body])] == ["1", "2", "3"]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    # A CR at the end of a chunk followed by LF must not produce an extra blank line.
    assert decode(["data: a\r", "\ndata: b\r\n", "\r\n"]) == [SSEEvent("message", "a\nb")]


def test_trailing_spaces_kept_leading_single_space_removed() -> None:
    # Anthropic pads data lines (W07-W11); only one leading space is field syntax.
    events = decode(['data: {"type":"ping"}      \n\ndata:  two\n\ndata:x\n\n'])
    assert [e.data for e in events] == ['{"type":"ping"}      ', " two", "x"]


def test_utf8_character_split_between_chunks() -> None:
    raw = "data: é€😀\n\n".encode()
    start = raw.index("😀".encode())
    chunks = [raw[: start + 1], raw[start + 1 : start + 3], raw[start + 3 :]]
    assert decode(chunks) == [SSEEvent("message", "é€😀")]


def test_bom_skipped_once_and_invalid_utf8_replaced() -> None:
    assert decode([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [SSEEvent("message", "x")]
    assert decode([b"data: \xff\n\n"]) == [SSEEvent("message", "\ufffd")]


def test_event_without_data_is_dropped_and_resets_the_type() -> None:
    assert decode(["event: ping\n\ndata: x\n\n"]) == [SSEEvent("message", "x")]


def test_id_field_is_kept_and_unknown_fields_ignored() -> None:
    assert decode(["id: 7\nretry: 10\nfoo: bar\ndata: x\n\n"]) == [SSEEvent("message", "x", "7")]


def test_close_dispatches_an_unterminated_last_event() -> None:
    # Servers that omit the final blank line, or the final newline entirely.
    assert decode(["data: 1\n\ndata: [DONE]"]) == [
        SSEEvent("message", "1"),
        SSEEvent("message", "[DONE]"),
    ]
    assert decode(["data: [DONE]\n"]) == [SSEEvent("message", "[DONE]")]


def test_empty_chunks_are_harmless() -> None:
    assert decode([b"", b"data: x", b"", b"\n\n", b""]) == [SSEEvent("message", "x")]


_BODY = (
    "\ufeff: hi\r\nevent: a\r\ndata: x  \r\ndata:y\r\n\r\n"
    'data: é€😀\r\r\nevent: b\ndata: {"k": "v"}   \n\n:c\ndata: end'
).encode()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sets(st.integers(min_value=1, max_value=len(_BODY) - 1), max_size=30))
def test_any_chunking_gives_the_same_events(cuts: set[int]) -> None:
    bounds = [0, *sorted(cuts), len(_BODY)]
    chunks = [_BODY[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(chunks) == decode([_BODY])
    assert len(decode([_BODY])) == 4


def test_feeding_is_incremental() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: par") == []
    assert decoder.feed("tial\n") == []
    assert decoder.feed("\n") == [SSEEvent("message", "partial")]
