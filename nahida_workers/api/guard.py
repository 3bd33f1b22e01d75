"""What stands in front of every route: a body-size limit and JSON errors.

Bad input never becomes a 500: malformed JSON and schema violations are 422
(400 for a body that is not JSON at all), an unknown id 404, a body over
``NAHIDA_API_MAX_BODY_BYTES`` 413, a saturated ledger or an outage 503 with
``Retry-After`` -- each as ``{"error": {"code": ..., "message": ...}}``.  The
token is checked in :mod:`nahida_workers.api.auth`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nahida_workers.cli.exits import classify
from nahida_workers.errors import (
    InboxFullError,
    LedgerDataError,
    NahidaError,
    NotFoundError,
    UserError,
)

__all__ = [
    "BUSY_RETRY_AFTER_S",
    "BodyLimit",
    "busy_body",
    "error_body",
    "install_error_handlers",
    "unavailable",
]

log = logging.getLogger(__name__)


#: Seconds a client is told to wait (``Retry-After``) when the server is at its limits.
BUSY_RETRY_AFTER_S = 1
#: Seconds a client is told to wait when the ledger or the broker is down.
OUTAGE_RETRY_AFTER_S = 5
#: Database errors that mean "the ledger is saturated", not "the ledger is down":
#: SQLAlchemy's pool timeout, PostgreSQL's statement and lock timeouts.
_BUSY_ERRORS = frozenset({"TimeoutError", "QueryCanceled", "LockNotAvailable"})


def error_body(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The JSON error every failure returns: ``{"error": {"code", "message"}}``."""
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def busy_body(message: str) -> JSONResponse:
    """503 ``busy`` with ``Retry-After``: the server is at a limit; ``message`` names it."""
    return error_body(
        503,
        "busy",
        f"{message}; retry after {BUSY_RETRY_AFTER_S} s",
        headers={"Retry-After": str(BUSY_RETRY_AFTER_S)},
    )


class BodyLimit:
    """ASGI middleware: refuse a request body over ``max_bytes`` with 413, before a route reads it.

    Checks ``Content-Length`` first, then counts the bytes of a chunked body
    as they arrive.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, refusing a body larger than ``max_bytes`` with 413."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_body(413, "body_too_large", f"request body over {self.max_bytes} bytes")
        await response(scope, receive, send)


class _TooLarge(StarletteHTTPException):
    """Raised while reading a chunked body past the limit (FastAPI re-raises HTTP errors)."""

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


def install_error_handlers(app: FastAPI) -> None:
    """Map every failure to a JSON error (see the module docstring)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_body(400, "malformed_json", "the request body is not valid JSON")
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in _json_path(tuple(first.get("loc", ()))))
        return error_body(422, "invalid_input", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            401: "unauthorized",
            403: "forbidden",
            404: "not_found",
            405: "method_not_allowed",
            413: "body_too_large",
            415: "unsupported_media_type",
            422: "invalid_input",
        }.get(exc.status_code, "http_error")
        # A 405 carries ``Allow`` (RFC 9110 section 15.5.6): keep the exception's headers,
        # with every method of the path (Starlette names only its first route's).
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed(request) or headers.get("Allow", "")
        return error_body(exc.status_code, code, str(exc.detail), headers=headers or None)

    @app.exception_handler(NahidaError)
    async def _nahida(_request: Request, exc: NahidaError) -> JSONResponse:
        if isinstance(exc, LedgerDataError):  # a value of the request the database refused
            return error_body(422, "invalid_input", " ".join(str(exc).split())[:500])
        if isinstance(exc, NotFoundError):
            return error_body(404, "not_found", str(exc))
        if isinstance(exc, InboxFullError):
            return error_body(429, "inbox_full", str(exc))
        if isinstance(exc, UserError):
            return error_body(400, "invalid_request", " ".join(str(exc).split()))
        return unavailable(exc)

    @app.exception_handler(UnicodeError)
    async def _unicode(_request: Request, exc: UnicodeError) -> JSONResponse:
        return error_body(400, "invalid_text", "input is not valid UTF-8 text")


def _allowed(request: Request) -> str:
    """Every method some route of ``request``'s path answers, as an ``Allow`` value."""
    from starlette.routing import Match

    # Asked method by method: an included router answers FULL for a method one
    # of its routes takes (FastAPI's included routers hide their routes).
    methods = [
        method
        for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]
    return ", ".join(methods)


#: The ``kind`` tags pydantic puts in the location of an error inside a provider.
_PROVIDER_KINDS = frozenset({"scripted", "openai", "anthropic"})


def _json_path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """An error location as the path into the request: ``job.provider.script``.

    Drops the leading ``body`` and the discriminator tags pydantic adds after
    a provider (``provider.scripted.script`` is ``provider.script`` in the JSON).
    """
    parts = list(loc[1:] if loc[:1] == ("body",) else loc)
    out: list[Any] = []
    for part in parts:
        after_provider = out and (
            out[-1] == "provider" or (isinstance(out[-1], int) and out[-2:-1] == ["fallbacks"])
        )
        if part in _PROVIDER_KINDS and after_provider:
            continue
        out.append(part)
    return tuple(out)


def unavailable(exc: BaseException) -> JSONResponse:
    """An exception a route raised as a JSON error: 503 for saturation or an outage, 500 for a bug.

    Every 503 carries ``Retry-After``: :data:`BUSY_RETRY_AFTER_S` when the
    ledger is saturated (no pooled connection within
    ``NAHIDA_API_DB_POOL_TIMEOUT_S``, a statement or row lock past
    ``NAHIDA_API_STATEMENT_TIMEOUT_MS`` / ``NAHIDA_API_LOCK_TIMEOUT_MS``),
    :data:`OUTAGE_RETRY_AFTER_S` when the ledger or the broker is down.
    """
    if _saturated(exc):
        log.warning("ledger saturated: %s", type(exc).__name__)
        return busy_body("the ledger is saturated (no connection, statement or row lock in time)")
    code, line = classify(exc)
    if code == 3:
        return error_body(
            503,
            "service_unavailable",
            line.removeprefix("error: "),
            headers={"Retry-After": str(OUTAGE_RETRY_AFTER_S)},
        )
    log.exception("internal error", exc_info=exc)
    return error_body(500, "internal_error", f"{type(exc).__name__}")


def _saturated(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error in its chain) is a pool, statement or lock timeout."""
    seen: set[int] = set()
    item: BaseException | None = exc
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        orig = getattr(item, "orig", None)
        for candidate in (item, orig):
            if candidate is None:
                continue
            name, module = type(candidate).__name__, type(candidate).__module__
            if name in _BUSY_ERRORS and module.startswith(("sqlalchemy", "psycopg")):
                return True
        item = item.__cause__ or item.__context__
    return False


def dumps(data: Any) -> str:
    """Compact JSON for server-sent events."""
    return json.dumps(data, separators=(",", ":"), default=str)
