"""``/login``: a browser trades the API token for a cookie, once, and only the right token.

``GET /login`` shows a form; ``POST /login`` (``application/x-www-form-urlencoded``,
field ``token``) checks the token in constant time *before* it sets anything:

* no token sent: 400 "a token is required";
* a wrong one: 401 "invalid token", logged (client address, never the token);
* the right one: 303 to ``/`` with the ``nahida_token`` cookie -- ``HttpOnly``
  (no script reads it), ``SameSite=Strict`` (no other site's request carries
  it), ``Path=/``, and ``Secure`` when the request came over TLS: ``nahida
  serve --ssl-certfile``, or a proxy in ``NAHIDA_API_TRUSTED_PROXIES`` that
  says ``X-Forwarded-Proto: https`` (uvicorn believes that header from those
  addresses only).

``/login?token=...`` sets nothing: a link could otherwise log a browser in
with a token of the link author's choosing (login CSRF), and a token in a
URL ends up in histories and logs.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment

from nahida_workers.api.auth import TOKEN_COOKIE, Verdict, client_of, token_verdict

__all__ = ["login_router"]

log = logging.getLogger(__name__)

#: Most fields a login form body may hold (a form has one).
MAX_FIELDS = 8


def login_router(env: Environment, token: str) -> APIRouter:
    """``GET /login`` (the form) and ``POST /login`` (the check) for ``token`` ('' = none)."""
    router = APIRouter(include_in_schema=False)

    def page(status: int, problem: str = "") -> HTMLResponse:
        html = env.get_template("login.html").render(problem=problem, needed=bool(token))
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    @router.get("/login")
    def login_form() -> HTMLResponse:
        return page(200)

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not token:
            return RedirectResponse("/", status_code=303)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            return page(415, "the login form is sent as application/x-www-form-urlencoded")
        sent = _field(await request.body(), "token")
        if sent is None:
            return page(400, "the form is not valid (UTF-8, at most a few fields)")
        verdict = token_verdict(sent, token)
        if verdict is Verdict.MISSING:
            return page(400, "a token is required")
        if verdict is Verdict.INVALID:
            log.warning("login refused from %s: invalid token", client_of(request.scope))
            return page(401, "invalid token")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            sent,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    return router


def _field(body: bytes, name: str) -> str | None:
    """The value of form field ``name`` ('' if absent); None for a body that is not a form."""
    try:
        fields: dict[str, Any] = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        return None
    values = fields.get(name) or [""]
    return str(values[0])
