"""The one retry layer (providers/retry.py), with an injected sleep and fixed jitter."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nahida_workers.errors import ProviderError
from nahida_workers.providers.http_errors import parse_retry_after
from nahida_workers.providers.retry import RetryPolicy, call_with_retries


def flaky(errors: list[Exception], result: str = "ok") -> tuple[Callable[[], str], list[int]]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return fn, calls


def retryable(retry_after: float | None = None) -> ProviderError:
    return ProviderError("busy", retryable=True, retry_after=retry_after)


def test_backoff_is_exponential_with_jitter_and_respects_retry_after() -> None:
    sleeps: list[float] = []
    fn, calls = flaky([retryable(), retryable(), retryable(7.0)])
    policy = RetryPolicy(max_retries=3, initial_delay_s=1, jitter_s=0.5, max_total_wait_s=100)
    assert call_with_retries(fn, policy=policy, sleep=sleeps.append, rng=lambda: 0.5) == "ok"
    assert sleeps == [1.25, 2.25, 7.0]  # 1*2^0+0.25, 1*2^1+0.25, max(Retry-After, 4.25)
    assert len(calls) == 4


def test_non_retryable_and_foreign_errors_are_not_retried() -> None:
    for error in (ProviderError("no", retryable=False), ValueError("bug")):
        sleeps: list[float] = []
        fn, calls = flaky([error])
        with pytest.raises(type(error)):
            call_with_retries(fn, policy=RetryPolicy(), sleep=sleeps.append)
        assert len(calls) == 1 and sleeps == []


def test_retry_after_beyond_the_total_wait_budget_gives_up_at_once() -> None:
    sleeps: list[float] = []
    error = retryable(retry_after=120.0)
    fn, calls = flaky([error])
    with pytest.raises(ProviderError) as info:
        call_with_retries(fn, policy=RetryPolicy(max_total_wait_s=30), sleep=sleeps.append)
    assert info.value is error and info.value.retryable  # "exhausted", not "refused"
    assert len(calls) == 1 and sleeps == []


def test_total_wait_is_capped() -> None:
    sleeps: list[float] = []
    fn, calls = flaky([retryable()] * 20)
    policy = RetryPolicy(max_retries=10, initial_delay_s=4, jitter_s=0, max_total_wait_s=10)
    with pytest.raises(ProviderError):
        call_with_retries(fn, policy=policy, sleep=sleeps.append)
    assert sum(sleeps) <= 10
    assert sleeps == [4, 6]  # the second backoff (8 s) is clamped to the budget left
    assert len(calls) == 3  # then the budget is spent: no zero-wait hammering


def test_retry_after_header_forms() -> None:
    from datetime import UTC, datetime

    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, now=now) == 30.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "-5"}) == 0.0
