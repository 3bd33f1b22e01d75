"""Admission: how many requests ``nahida serve`` works on at once, and how long the rest wait.

A burst of requests must not turn into a pile of threads all waiting for one
of a few ledger connections (they waited 30 s, then failed with a 500).  So:

* at most ``limit`` requests are worked on at once -- the API's pool size
  (``NAHIDA_API_DB_POOL_SIZE``): a request holds at most one ledger
  connection at a time, so none of them waits for the pool;
* the others wait in line, in arrival order, at most ``queue_timeout_s``
  (``NAHIDA_API_QUEUE_TIMEOUT_S``); a request still waiting then is answered
  ``503`` with ``Retry-After``, never left hanging;
* a request's body is read before it takes a place (bounded by the body
  limit outside this middleware), so a slow upload holds no slot;
* a slot is given back when the response starts: an event stream keeps none
  while it streams.  Event streams are bounded on their own
  (``NAHIDA_API_MAX_FOLLOWERS``): one more is a ``503`` at once.

Sync routes run on anyio's worker threads; their number is raised to cover
every slot and every stream, so no admitted request waits for a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nahida_workers.api.guard import busy_body

__all__ = ["Admission", "AdmissionLimits"]

#: Worker threads beyond the slots and streams (the web pages' helpers, tests' probes).
SPARE_THREADS = 4


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds of :class:`Admission` (from ``NAHIDA_API_*`` settings).

    Attributes:
        requests: requests worked on at once (``api_db_pool_size``).
        queue_timeout_s: longest wait for a slot, seconds (``api_queue_timeout_s``).
        streams: event streams followed at once (``api_max_followers``).
    """

    requests: int
    queue_timeout_s: float
    streams: int

    @property
    def threads(self) -> int:
        """Worker threads (anyio) needed: one per slot, one per stream, a few spare."""
        return self.requests + self.streams + SPARE_THREADS


class Admission:
    """ASGI middleware enforcing :class:`AdmissionLimits` (see the module docstring).

    Args:
        app: the app behind it.
        limits: the bounds.
        exempt: paths served without a slot (health, schema, docs, login).
        is_stream: whether a path is an event stream.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: AdmissionLimits,
        exempt: frozenset[str],
        is_stream: Callable[[str], bool],
    ) -> None:
        self.app = app
        self.limits = limits
        self.exempt = exempt
        self.is_stream = is_stream
        self._slots: anyio.Semaphore | None = None
        self.streams = 0

    def _semaphore(self) -> anyio.Semaphore:
        """The slots, made on first use inside the server's event loop."""
        if self._slots is None:
            self._slots = anyio.Semaphore(self.limits.requests)
            limiter = anyio.to_thread.current_default_thread_limiter()
            limiter.total_tokens = max(limiter.total_tokens, self.limits.threads)
        return self._slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request within the limits, or answer 503 with ``Retry-After``."""
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        stream = self.is_stream(scope["path"])
        if stream and self.streams >= self.limits.streams:
            message = (
                f"{self.streams} event streams are being followed, the most this server "
                "allows (NAHIDA_API_MAX_FOLLOWERS)"
            )
            await busy_body(message)(scope, receive, send)
            return
        body = await _read_body(receive)
        slots = self._semaphore()
        with anyio.move_on_after(self.limits.queue_timeout_s) as waited:
            await slots.acquire()
        if waited.cancelled_caught:
            message = (
                f"{self.limits.requests} requests are in progress, the most this server works "
                f"on at once (NAHIDA_API_DB_POOL_SIZE), and this one waited "
                f"{self.limits.queue_timeout_s:g} s (NAHIDA_API_QUEUE_TIMEOUT_S)"
            )
            await busy_body(message)(scope, receive, send)
            return
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                slots.release()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            await send(message)

        self.streams += stream
        try:
            await self.app(scope, _replay(body, receive), sending)
        finally:
            release()
            self.streams -= stream


async def _read_body(receive: Receive) -> list[Message]:
    """Every ``http.request`` message of the body (the size limit is enforced outside)."""
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` again, then waits on the real one."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
