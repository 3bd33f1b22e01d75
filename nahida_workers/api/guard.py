"""What stands in front of every route: the bearer token, a body-size limit, JSON errors.

Bad input never becomes a 500: malformed JSON and schema violations are 422
(400 for a body that is not JSON at all), an unknown id 404, a body over
``NAHIDA_API_MAX_BODY_BYTES`` 413, a wrong token 401, a ledger outage 503 --
each as ``{"error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nahida_workers.cli.exits import classify
from nahida_workers.errors import InboxFullError, NahidaError, NotFoundError, UserError

__all__ = ["BodyLimit", "error_body", "install_error_handlers", "token_ok", "unavailable"]

log = logging.getLogger(__name__)

#: Where the web view keeps the token a browser sent once (``/login?token=``).
TOKEN_COOKIE = "nahida_token"


def error_body(status: int, code: str, message: str) -> JSONResponse:
    """The JSON error every failure returns."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


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


def token_ok(request: Request, token: str) -> bool:
    """True when no token is configured or the request carries it (header or cookie)."""
    if not token:
        return True
    header = request.headers.get("authorization", "")
    sent = header[7:] if header.lower().startswith("bearer ") else ""
    sent = sent or request.cookies.get(TOKEN_COOKIE, "")
    return hmac.compare_digest(sent.encode(), token.encode())


def install_error_handlers(app: FastAPI) -> None:
    """Map every failure to a JSON error (see the module docstring)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_body(400, "malformed_json", "the request body is not valid JSON")
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error_body(422, "invalid_input", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            404: "not_found",
            405: "method_not_allowed",
            401: "unauthorized",
            413: "body_too_large",
            422: "invalid_input",
        }.get(exc.status_code, "http_error")
        return error_body(exc.status_code, code, str(exc.detail))

    @app.exception_handler(NahidaError)
    async def _nahida(_request: Request, exc: NahidaError) -> JSONResponse:
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


def unavailable(exc: BaseException) -> JSONResponse:
    """An exception a route raised as a JSON error: 503 for an outage, 500 for a bug."""
    code, line = classify(exc)
    if code == 3:
        return error_body(503, "service_unavailable", line.removeprefix("error: "))
    log.exception("internal error", exc_info=exc)
    return error_body(500, "internal_error", f"{type(exc).__name__}")


def dumps(data: Any) -> str:
    """Compact JSON for server-sent events."""
    return json.dumps(data, separators=(",", ":"), default=str)
