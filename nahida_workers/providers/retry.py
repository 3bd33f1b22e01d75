"""The one retry layer for provider calls (STYLE.md habit 5; errors.py).

Both HTTP adapters call :func:`call_with_retries`; nothing else in the package
retries a provider call.  Only a :class:`ProviderError` with ``retryable=True``
is retried.  Each wait is exponential backoff with jitter, but never shorter
than the server's ``retry_after`` (seconds).  Retrying stops after
``max_retries`` retries, or as soon as the next wait would push the total time
spent waiting past ``max_total_wait_s`` (or that budget is spent); the last error is then re-raised
unchanged (still ``retryable``, so a caller such as the fallback provider knows
the retries were exhausted rather than refused).

A retried attempt starts from scratch: it streams its text and reports its
tool calls again.  The HTTP driver puts one de-duplicating sink in front of
``on_tool_call`` per ``complete()`` call, so an identical call is reported
once across attempts (``http_provider.py``, ``early_calls.DedupSink``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception

from nahida_workers.errors import ProviderError, ProviderProtocolError

__all__ = ["RetryPolicy", "call_with_retries"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Limits for :func:`call_with_retries` (all durations in seconds).

    Attributes:
        max_retries: retries after the first attempt (0 = no retry).
        initial_delay_s: backoff before the first retry; doubles each retry.
        max_delay_s: cap on one backoff (before jitter).
        jitter_s: up to this much random time is added to each backoff.
        max_total_wait_s: cap on the sum of all waits of one call.
        max_protocol_repairs: retries of a malformed response
            (:class:`ProviderProtocolError`; a merely truncated stream is
            retried like a transport error): one repair, then the run fails
            ``provider_protocol_invalid`` (DESIGN.md section 6).
    """

    max_retries: int = 2
    initial_delay_s: float = 0.5
    max_delay_s: float = 20.0
    jitter_s: float = 0.5
    max_total_wait_s: float = 60.0
    max_protocol_repairs: int = 1


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it succeeds or the policy gives up.

    Args:
        fn: one attempt; raises :class:`ProviderError` on failure.
        policy: attempt and wait limits.
        sleep: how waits are performed (tests pass a recorder; seconds).
        rng: a ``[0, 1)`` source for the jitter (tests may fix it).

    Returns:
        ``fn``'s result.

    Raises:
        ProviderError: the last error (not retryable, or retries / wait budget spent).
        Exception: anything else ``fn`` raises, unchanged and not retried.
    """
    waits: dict[int, float] = {}

    def next_wait(state: RetryCallState) -> float:
        attempt = state.attempt_number
        if attempt not in waits:
            exc = _exception(state)
            retry_after = exc.retry_after if isinstance(exc, ProviderError) else None
            backoff = min(policy.max_delay_s, policy.initial_delay_s * 2 ** (attempt - 1))
            backoff += policy.jitter_s * rng()
            remaining = max(0.0, policy.max_total_wait_s - state.idle_for)
            waits[attempt] = max(retry_after or 0.0, min(backoff, remaining))
        return waits[attempt]

    protocol_failures = 0

    def should_stop(state: RetryCallState) -> bool:
        nonlocal protocol_failures
        if state.attempt_number > policy.max_retries:
            return True
        exc = _exception(state)
        if isinstance(exc, ProviderProtocolError) and not exc.truncated:
            protocol_failures += 1
            if protocol_failures > policy.max_protocol_repairs:
                return True
        remaining = policy.max_total_wait_s - state.idle_for
        # Give up once the wait budget is spent, and never wait less than
        # Retry-After: if that does not fit in what is left, give up now.
        return remaining <= 0 or next_wait(state) > remaining

    retrying = Retrying(
        retry=retry_if_exception(_retryable),
        stop=should_stop,
        wait=next_wait,
        sleep=sleep,
        before_sleep=lambda state: _log_retry(state, policy.max_retries),
        reraise=True,
    )
    return retrying(fn)


def _exception(state: RetryCallState) -> BaseException | None:
    """The exception the attempt ended with, if any."""
    return state.outcome.exception() if state.outcome is not None else None


def _log_retry(state: RetryCallState, max_retries: int) -> None:
    """One warning line per retry: the failure code and the wait."""
    exc = _exception(state)
    code = exc.failure_code.value if isinstance(exc, ProviderError) else "?"
    log.warning(
        "provider call failed (%s), retry %d/%d in %.2f s",
        code,
        state.attempt_number,
        max_retries,
        state.upcoming_sleep,
    )
