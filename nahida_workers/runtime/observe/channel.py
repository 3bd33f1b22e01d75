"""User-visible events and the channel policies that filter them (DESIGN.md section 6).

What a person watching a session sees: ``commentary`` (assistant text that
comes with tool calls), ``tool_started``, ``tool_result``, ``final`` and
``done`` (terminal state, reason, run id, trace id).  Every event is emitted
after the fact it shows is committed to the ledger.  For any state other than
``completed`` the final text is written by the runtime and says plainly that
the work is not verified / not finished / failed / cancelled.

Channel policies: ``final_only`` (default: final and done), ``progress_updates``
(everything), ``silent_tool_status`` (commentary, final and done; no tool
events).  Sinks: a Redis stream per session (``nahida watch``), memory (tests),
null.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from nahida_workers.constants import EVENT_STREAM_KEY_TEMPLATE

__all__ = [
    "ChannelPolicy",
    "EventSink",
    "MemorySink",
    "NullSink",
    "RedisStreamSink",
    "VisibleEvent",
    "VisibleKind",
    "allowed",
    "stream_key",
]


class VisibleKind(StrEnum):
    """Kinds of user-visible events."""

    COMMENTARY = "commentary"
    TOOL_STARTED = "tool_started"
    TOOL_RESULT = "tool_result"
    FINAL = "final"
    DONE = "done"


class ChannelPolicy(StrEnum):
    """Which kinds a session's watchers see."""

    FINAL_ONLY = "final_only"
    PROGRESS_UPDATES = "progress_updates"
    SILENT_TOOL_STATUS = "silent_tool_status"


_ALLOWED: dict[ChannelPolicy, frozenset[VisibleKind]] = {
    ChannelPolicy.FINAL_ONLY: frozenset({VisibleKind.FINAL, VisibleKind.DONE}),
    ChannelPolicy.PROGRESS_UPDATES: frozenset(VisibleKind),
    ChannelPolicy.SILENT_TOOL_STATUS: frozenset(
        {VisibleKind.COMMENTARY, VisibleKind.FINAL, VisibleKind.DONE}
    ),
}


def allowed(policy: ChannelPolicy, kind: VisibleKind) -> bool:
    """Whether ``policy`` lets ``kind`` through."""
    return kind in _ALLOWED[policy]


@dataclass(frozen=True)
class VisibleEvent:
    """One event a watcher sees; ``data`` is small and JSON-safe."""

    kind: VisibleKind
    session_id: str
    run_id: str
    data: dict[str, Any] = field(default_factory=dict)


class EventSink(Protocol):
    """Where user-visible events go."""

    def emit(self, event: VisibleEvent) -> None:
        """Deliver one event (never raises: watching is best effort)."""
        ...


class NullSink:
    """Drops everything."""

    def emit(self, event: VisibleEvent) -> None:
        """Drop ``event``."""


@dataclass
class MemorySink:
    """Keeps events in a list (tests)."""

    events: list[VisibleEvent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, event: VisibleEvent) -> None:
        """Append ``event``."""
        with self._lock:
            self.events.append(event)


def stream_key(session_id: str, prefix: str = "") -> str:
    """The Redis stream of a session's user-visible events."""
    return prefix + EVENT_STREAM_KEY_TEMPLATE.format(session_id=session_id)


class RedisStreamSink:
    """``XADD`` to a capped stream per session; ``nahida watch`` reads it.

    Args:
        client: a redis-py (or fakeredis) client.
        prefix: key prefix (``settings.redis_key_prefix``).
        maxlen: approximate cap on each stream's length.
        ttl_s: seconds a stream lives after its last event.
    """

    def __init__(self, client: Any, *, prefix: str = "", maxlen: int = 1000, ttl_s: int = 86400):
        self._client = client
        self._prefix = prefix
        self._maxlen = maxlen
        self._ttl_s = ttl_s

    def emit(self, event: VisibleEvent) -> None:
        """Append ``event`` to the session's stream; Redis trouble is logged, not raised."""
        key = stream_key(event.session_id, self._prefix)
        fields = {"kind": event.kind.value, "run_id": event.run_id, "data": json.dumps(event.data)}
        try:
            pipe = self._client.pipeline()
            pipe.xadd(key, fields, maxlen=self._maxlen, approximate=True)
            pipe.expire(key, self._ttl_s)
            pipe.execute()
        except Exception as exc:  # watching is best effort; the ledger holds the facts
            import logging

            logging.getLogger(__name__).warning("visible event not published: %s", exc)
