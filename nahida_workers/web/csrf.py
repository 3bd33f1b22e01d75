"""CSRF protection of the console's actions (a browser acts with its login cookie).

A cookie goes with every request the browser makes to this site, whoever
wrote the page that asked; so an action sent with the cookie must also
carry a token only this site's pages know.  The token is an HMAC of a fixed
label under the API token (``NAHIDA_API_TOKEN``), or under a random secret
of this process when there is none: a page from elsewhere cannot compute it
and cannot read it from ours (same-origin policy).  Pages put it in
``<meta name="csrf-token">``; the script sends it as ``X-CSRF-Token``.

An action also refuses an ``Origin`` header that names another site.  A
request with ``Authorization: Bearer`` carries no cookie authority (a page
from elsewhere cannot set that header), so it needs no token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["CSRF_HEADER", "CsrfGuard"]

CSRF_HEADER = "x-csrf-token"
_LABEL = b"nahida console csrf v1"


class CsrfGuard:
    """Issues and checks the console's CSRF token.

    Args:
        api_token: ``NAHIDA_API_TOKEN`` ('' = none: a per-process secret is used).
    """

    def __init__(self, api_token: str) -> None:
        key = api_token.encode("utf-8") if api_token else secrets.token_bytes(32)
        self.token = hmac.new(key, _LABEL, hashlib.sha256).hexdigest()

    def refusal(self, request: Request) -> str | None:
        """Why ``request`` may not act (a sentence), or None when it may."""
        origin = request.headers.get("origin")
        if origin and origin != "null":
            parts = urlsplit(origin)
            if parts.netloc != request.headers.get("host", ""):
                return f"refused: the request came from another site ({origin})"
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return None
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent:
            return "refused: the action carries no CSRF token; reload the page and try again"
        if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), self.token.encode()):
            return "refused: the CSRF token is not this server's; reload the page and try again"
        return None
