"""Riding out a short ledger outage: retry a read or a commit point, never a commit twice.

A PostgreSQL failover, a restart or an administrator terminating backends
breaks the connections a worker holds; SQLAlchemy maps that to
:class:`~nahida_workers.errors.LedgerUnavailableError` (retryable).  The
session owner retries a commit point for a bounded time instead of giving
up the run -- the tool results it holds in memory are the evidence of side
effects that already happened (DESIGN.md section 3 step 5).

A commit whose connection broke may still have landed: the server committed
and the acknowledgement was lost.  Before writing again, the retry asks the
ledger whether the first attempt landed, so a commit is never applied twice
and never refused as a duplicate of itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.ports import Clock, SystemClock

log = logging.getLogger(__name__)
T = TypeVar("T")


def outage_retrying(
    within_s: float, *, clock: Clock | None = None, started: float | None = None, done: int = 0
) -> Retrying:
    """A tenacity loop that retries ``LedgerUnavailableError`` for ``within_s`` seconds.

    Waits 0.1 s, 0.2 s, 0.4 s ... (at most 2 s) between attempts; the last
    error is re-raised when the time is up.  ``within_s=0`` makes one attempt.
    Time is read and slept through ``clock`` (the Clock port; default the
    system clock), so a test with a fake clock never waits out a real window.
    ``started`` (clock seconds) and ``done`` (attempts already made and
    waited after) continue a window begun before the loop.
    """
    clock = clock or SystemClock()
    begun = clock.monotonic() if started is None else started

    def spent(_state: RetryCallState) -> bool:
        return clock.monotonic() - begun >= within_s

    backoff = wait_exponential(multiplier=0.1, max=2.0)

    def wait(state: RetryCallState) -> float:
        state.attempt_number += done  # the schedule goes on from the attempts made before
        try:
            return backoff(state)
        finally:
            state.attempt_number -= done

    return Retrying(
        retry=retry_if_exception_type(LedgerUnavailableError),
        stop=spent,
        wait=wait,
        sleep=clock.sleep,
        reraise=True,
    )


def _first_failed(within_s: float, clock: Clock, started: float) -> bool:
    """After a failed first attempt: wait as the loop would; False when the window is spent."""
    if clock.monotonic() - started >= within_s:
        return False
    clock.sleep(0.1)  # the loop's first wait (0.1 s, as wait_exponential gives attempt 1)
    return True


def read_through_outage(read: Callable[[], T], *, within_s: float, clock: Clock | None = None) -> T:
    """``read()``, retried through a ledger outage of up to ``within_s`` seconds.

    Raises:
        LedgerUnavailableError: still unavailable when the time is up.
    """
    clock = clock or SystemClock()
    started = clock.monotonic()
    try:  # the first attempt outside tenacity: a healthy ledger pays no retry machinery
        return read()
    except LedgerUnavailableError:
        if not _first_failed(within_s, clock, started):
            raise
    for attempt in outage_retrying(within_s, clock=clock, started=started, done=1):
        with attempt:
            return read()
    raise AssertionError("unreachable")  # pragma: no cover


def commit_through_outage(
    write: Callable[[], T],
    *,
    landed: Callable[[], bool],
    within_s: float,
    before_retry: Callable[[], None] = lambda: None,
    clock: Clock | None = None,
) -> T | None:
    """Run the commit ``write()``, retrying it through a ledger outage.

    Args:
        write: one transaction; it either commits as a whole or not at all.
        landed: asks the ledger whether an earlier attempt committed after
            all (called only after an attempt failed ``LedgerUnavailable``).
        within_s: how long to keep trying, in seconds.
        before_retry: runs before each retry -- e.g. a lease check, so an
            owner that lost its lease meanwhile stops instead of writing.
        clock: the Clock port the window is measured and slept on.

    Returns:
        What ``write`` returned, or None when an earlier attempt was found to
        have landed (the commit happened exactly once).

    Raises:
        LedgerUnavailableError: still unavailable when the time is up.
        Anything ``write``, ``landed`` or ``before_retry`` raise otherwise
        (a ledger refusal, a lost lease) -- not retried.
    """
    clock = clock or SystemClock()
    started = clock.monotonic()
    try:  # the first attempt outside tenacity: a healthy ledger pays no retry machinery
        return write()
    except LedgerUnavailableError as exc:
        log.warning("commit: ledger unavailable (%s); retrying", exc)
        if not _first_failed(within_s, clock, started):
            raise
    failed_once = True
    for attempt in outage_retrying(within_s, clock=clock, started=started, done=1):
        with attempt:
            if failed_once:
                before_retry()
                if landed():
                    log.warning("commit: the attempt cut off by the outage had landed")
                    return None
            try:
                return write()
            except LedgerUnavailableError as exc:
                failed_once = True
                log.warning("commit: ledger unavailable (%s); retrying", exc)
                raise
    raise AssertionError("unreachable")  # pragma: no cover
