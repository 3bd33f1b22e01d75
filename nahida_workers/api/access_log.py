"""One log line per request ``nahida serve`` answers (docs/operating/processes.md).

The line says the method, the path (never the query string: a token or a
prompt may sit there), the status, the time to the last body byte in
milliseconds, the bytes sent and the client's address.  It is logged on
``nahida.access`` at INFO; ``nahida serve`` routes that logger to stderr, as
text or, with ``NAHIDA_LOG_FORMAT=json``, one JSON object per line whose
``request`` member carries the same fields (:class:`~nahida_workers.logs.JsonFormatter`).
An event stream is logged when it ends.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ACCESS_LOGGER", "RequestLog"]

#: The logger every request line goes to.
ACCESS_LOGGER = "nahida.access"

log = logging.getLogger(ACCESS_LOGGER)


class RequestLog:
    """ASGI middleware: log each HTTP request once, when its answer is sent (or it failed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; log one line when the response is complete."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        seen: dict[str, int] = {"status": 500, "bytes": 0}

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            _log_line(scope, seen["status"], seen["bytes"], time.monotonic() - started)


def _log_line(scope: Scope, status: int, sent: int, seconds: float) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    client = scope.get("client")
    fields: dict[str, Any] = {
        "method": scope.get("method", ""),
        "path": scope.get("path", ""),
        "status": status,
        "ms": round(seconds * 1000, 1),
        "bytes": sent,
        "client": client[0] if client else None,
    }
    log.info(
        "%s %s %d %.1fms %dB %s",
        fields["method"],
        fields["path"],
        status,
        fields["ms"],
        sent,
        fields["client"] or "-",
        extra={"request": fields},
    )
