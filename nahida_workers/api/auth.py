"""The bearer token in front of every route, and the last line against a 500 with a traceback.

With ``NAHIDA_API_TOKEN`` set, every request but ``/healthz`` and ``/login``
carries the token: ``Authorization: Bearer TOKEN`` (clients) or the
``nahida_token`` cookie that ``POST /login`` sets (browsers).  Compared in
constant time (:func:`hmac.compare_digest`).  A request without a token is
``401 unauthorized``; one with a wrong token is ``401 invalid_token`` (RFC
6750's ``error="invalid_token"``) and is logged -- client address, method and
path, never the token sent.
"""

from __future__ import annotations

import hmac
import logging
from enum import Enum

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nahida_workers.api.guard import error_body, unavailable

__all__ = ["TOKEN_COOKIE", "Auth", "Verdict", "client_of", "token_verdict"]

log = logging.getLogger(__name__)

#: Where the web view keeps the token a browser logged in with (``POST /login``).
TOKEN_COOKIE = "nahida_token"


class Verdict(Enum):
    """What a request's credentials amount to."""

    OK = "ok"
    MISSING = "missing"
    INVALID = "invalid"


def token_verdict(sent: str, token: str) -> Verdict:
    """``sent`` against the configured ``token`` (constant time); OK when no token is set."""
    if not token:
        return Verdict.OK
    if not sent:
        return Verdict.MISSING
    if hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), token.encode("utf-8")):
        return Verdict.OK
    return Verdict.INVALID


def _sent_token(headers: Headers) -> str:
    """The bearer token of the ``Authorization`` header, else the login cookie ('' if neither)."""
    header = headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    cookies = cookie_parser(headers.get("cookie", ""))
    return cookies.get(TOKEN_COOKIE, "")


def client_of(scope: Scope) -> str:
    """The client's address as the server saw it (a trusted proxy's ``X-Forwarded-For`` applied)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class Auth:
    """ASGI middleware: the token check, then any escaped exception as a JSON 503/500.

    Args:
        app: the app behind it.
        token: ``NAHIDA_API_TOKEN`` ('' = no token: every request passes).
        open_paths: paths served without a token (``/healthz``, ``/login``).
    """

    def __init__(self, app: ASGIApp, *, token: str, open_paths: frozenset[str]) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a request without the token (401); otherwise serve it, errors as JSON."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] not in self.open_paths:
            verdict = token_verdict(_sent_token(Headers(scope=scope)), self.token)
            if verdict is not Verdict.OK:
                await self._refuse(verdict, scope, receive, send)
                return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # an outage (503) or a bug (500): JSON, one log line
            if started:
                raise
            await unavailable(exc)(scope, receive, send)

    async def _refuse(self, verdict: Verdict, scope: Scope, receive: Receive, send: Send) -> None:
        if verdict is Verdict.MISSING:
            response = error_body(
                401,
                "unauthorized",
                "a token is required: Authorization: Bearer TOKEN (or log in at /login)",
                headers={"WWW-Authenticate": 'Bearer realm="nahida"'},
            )
        else:
            log.warning(
                "refused %s %s from %s: invalid token",
                scope.get("method", "?"),
                scope["path"][:200].encode("unicode_escape").decode("ascii"),
                client_of(scope),
            )
            response = error_body(
                401,
                "invalid_token",
                "invalid token",
                headers={"WWW-Authenticate": 'Bearer realm="nahida", error="invalid_token"'},
            )
        await response(scope, receive, send)
