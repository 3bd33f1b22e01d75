r"""Incremental Server-Sent Events decoder (bytes or text chunks in, events out).

Implements the event-stream interpretation rules of the WHATWG HTML standard,
section 9.2.6 "Interpreting an event stream":

* lines end with CRLF, LF or CR; a chunk boundary may fall anywhere, including
  between the CR and LF of one line end and inside a UTF-8 character;
* a line starting with ``:`` is a comment (keep-alives) and is ignored;
* ``field: value`` -- one leading space after the colon is removed, trailing
  spaces are kept (Anthropic pads its ``data:`` lines; ``json.loads`` does
  not mind them);
* several ``data:`` lines of one event are joined with ``\\n``;
* a blank line dispatches the event; an event with no ``data`` is dropped;
* the stream is decoded as UTF-8 with replacement, a leading BOM is skipped.

One deliberate leniency: :meth:`SSEDecoder.close` dispatches an event that was
still open at the end of the body (servers that omit the last blank line, or a
final ``data: [DONE]`` with no newline).  A body cut in the middle of a line
then yields a truncated ``data`` value, which the stream parsers reject as
malformed JSON -- never silently accepted.

The decoder never re-scans text it has already consumed: each ``feed`` only
splits the new text plus the unfinished last line.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    r"""One dispatched event.

    Attributes:
        event: the ``event:`` field, ``"message"`` when the event had none.
        data: the ``data:`` lines joined with ``\\n``.
        id: the last ``id:`` field seen, if any.
    """

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Turns an event-stream body into :class:`SSEEvent` values, chunk by chunk.

    Usage::

        decoder = SSEDecoder()
        for chunk in body_chunks:          # bytes or str, any split
            for event in decoder.feed(chunk):
                ...
        for event in decoder.close():
            ...
    """

    __slots__ = ("_bom_checked", "_data", "_event", "_id", "_pending", "_skip_lf", "_utf8")

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # the unfinished last line, line ends already normalised
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF is its pair
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._bom_checked = False

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        """Consume one chunk and return the events it completed (maybe none)."""
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        if not self._bom_checked:
            self._bom_checked = True
            text = text.removeprefix("\ufeff")
        if self._skip_lf:
            self._skip_lf = False
            text = text.removeprefix("\n")
        if "\r" in text:
            self._skip_lf = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self._pending:
            text = self._pending + text
        lines = text.split("\n")
        self._pending = lines.pop()
        return self._lines(lines)

    def close(self) -> list[SSEEvent]:
        """Flush at end of body: process an unterminated last line, dispatch an open event."""
        events = self.feed(self._utf8.decode(b"", final=True))
        if self._pending:
            events.extend(self._lines([self._pending]))
            self._pending = ""
        if self._data:
            events.append(self._dispatch())
        return events

    def _lines(self, lines: list[str]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    self._event = ""
                continue
            if line[0] == ":":
                continue
            field, sep, value = line.partition(":")
            if sep and value[:1] == " ":
                value = value[1:]
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id" and "\x00" not in value:
                self._id = value
            # "retry" and unknown fields are ignored: we never reconnect.
        return events

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        event = SSEEvent(self._event or "message", data, self._id)
        self._data = []
        self._event = ""
        return event
