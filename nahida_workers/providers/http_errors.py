"""Translate provider failures into typed errors at the edge (STYLE.md habit 5).

Pure: takes a status, headers and body bytes (or a parsed error object from a
stream), never an httpx object, so the stream parsers can use it too.

Status rules (OpenAI and Anthropic API error docs; the retry set matches both
official SDKs):

======================  ======================  =========
status                  failure code            retryable
======================  ======================  =========
400, 413, 422, 4xx      provider_bad_request    no
401, 403                provider_auth           no
404                     provider_not_found      no
408                     provider_timeout        yes
409                     provider_unavailable    yes
429                     provider_rate_limited   yes
5xx (incl. 529)         provider_unavailable    yes
======================  ======================  =========

``x-should-retry: true|false`` (Anthropic, recording W12) overrides the status
rule.  ``Retry-After`` is seconds or an HTTP-date; OpenAI's ``retry-after-ms``
wins when present.  The exception *message* carries at most the provider's
error ``type``/``code`` identifiers: never the body text (an OpenAI 401 message
echoes part of the key) and never a credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from nahida_workers.core.events import FailureCode
from nahida_workers.errors import ProviderError

__all__ = [
    "ProviderAPIError",
    "classify_status",
    "error_from_payload",
    "error_from_response",
    "parse_retry_after",
]

# Error ``type`` -> the HTTP status it stands for, for errors that arrive inside
# a 200 stream (Anthropic "Errors" doc; OpenAI error types).
_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_IDENT = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class ProviderAPIError(ProviderError):
    """A :class:`ProviderError` built from the provider's own error object.

    Attributes:
        error_body: the parsed error object (``body["error"]`` for both APIs),
            ``None`` when the body was not JSON.  For tests and debugging;
            never stored in the ledger.
        error_type: the object's ``type`` when it is a short identifier.
        error_code: the object's ``code`` when it is a short identifier.
    """

    def __init__(
        self,
        message: str,
        *,
        error_body: dict[str, Any] | None = None,
        status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        failure_code: FailureCode | None = None,
    ) -> None:
        super().__init__(
            message,
            status=status,
            retryable=retryable,
            retry_after=retry_after,
            failure_code=failure_code,
        )
        self.error_body = error_body
        self.error_type = _ident(error_body, "type")
        self.error_code = _ident(error_body, "code")


def classify_status(status: int) -> tuple[FailureCode, bool]:
    """Return ``(failure_code, retryable)`` for an HTTP status (table above)."""
    if status in (401, 403):
        return FailureCode.PROVIDER_AUTH, False
    if status == 404:
        return FailureCode.PROVIDER_NOT_FOUND, False
    if status == 408:
        return FailureCode.PROVIDER_TIMEOUT, True
    if status == 409:
        return FailureCode.PROVIDER_UNAVAILABLE, True
    if status == 429:
        return FailureCode.PROVIDER_RATE_LIMITED, True
    if status >= 500:
        return FailureCode.PROVIDER_UNAVAILABLE, True
    if 400 <= status < 500:
        return FailureCode.PROVIDER_BAD_REQUEST, False
    return FailureCode.PROVIDER_ERROR, False


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait, or ``None``.

    Args:
        headers: response headers (any key case).
        now: the current time for an HTTP-date value (default: the wall clock).

    Returns:
        ``retry-after-ms`` / 1000 when present, else ``Retry-After`` as seconds
        or as an HTTP-date relative to ``now`` (RFC 9110 section 10.2.3);
        never negative; ``None`` when absent or unparsable.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_from_payload(
    error: Mapping[str, Any],
    *,
    provider: str,
    status: int | None = None,
) -> ProviderAPIError:
    """Typed error for an error object that arrived inside a stream.

    Used for Anthropic's mid-stream ``event: error`` and for OpenAI-compatible
    servers that send ``data: {"error": {...}}``.  The status is implied by the
    error ``type`` (``overloaded_error`` -> 529 -> retryable,
    ``provider_unavailable``); unknown types are not retryable.
    """
    body = dict(error)
    implied = status or _TYPE_STATUS.get(str(body.get("type")))
    if implied is None:
        code, retryable = FailureCode.PROVIDER_ERROR, False
    else:
        code, retryable = classify_status(implied)
    return ProviderAPIError(
        _message(provider, "stream error", code, body),
        error_body=body,
        status=status,
        retryable=retryable,
        failure_code=code,
    )


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    provider: str,
    secret: str | None = None,
) -> ProviderAPIError:
    """Typed error for a non-2xx response.

    A non-2xx answer to a stream request is a JSON body, not SSE (W06, W12):
    OpenAI ``{"error": {...}}``, Anthropic ``{"type": "error", "error": {...}}``.

    Args:
        status: the HTTP status.
        headers: response headers (``Retry-After``, ``x-should-retry``).
        body: the raw body; parsed, never copied into the message.
        provider: adapter name for the message.
        secret: the API key, scrubbed from ``error_body`` if the server echoed it.
    """
    code, retryable = classify_status(status)
    lowered = {k.lower(): v for k, v in headers.items()}
    should_retry = lowered.get("x-should-retry", "").strip().lower()
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    error_body = _error_object(body)
    if error_body is not None and secret:
        error_body = _scrub(error_body, secret)
    if error_body is not None and error_body.get("code") == FailureCode.SCRIPT_EXHAUSTED.value:
        # Our own mock server's "script exhausted" (mock_server.py): keep the code.
        code = FailureCode.SCRIPT_EXHAUSTED
    return ProviderAPIError(
        _message(provider, f"HTTP {status}", code, error_body),
        error_body=error_body,
        status=status,
        retryable=retryable,
        retry_after=parse_retry_after(headers) if retryable else None,
        failure_code=code,
    )


def _error_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    inner = parsed.get("error")
    if isinstance(inner, dict):
        return inner
    if isinstance(inner, str):  # llama.cpp / some proxies: {"error": "text"}
        return {"message": inner}
    return parsed


def _scrub(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return value.replace(secret, "[redacted]")
    if isinstance(value, dict):
        return {k: _scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secret) for v in value]
    return value


def _ident(body: Mapping[str, Any] | None, key: str) -> str | None:
    value = body.get(key) if body else None
    return value if isinstance(value, str) and _IDENT.match(value) else None


def _message(provider: str, what: str, code: FailureCode, body: Mapping[str, Any] | None) -> str:
    parts = [f"{provider}: {what} ({code.value})"]
    for key in ("type", "code"):
        ident = _ident(body, key)
        if ident is not None:
            parts.append(f"{key}={ident}")
    return " ".join(parts)
