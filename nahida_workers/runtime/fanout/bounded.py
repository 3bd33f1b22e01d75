"""Running one tool call on its own thread, so the runtime can stop waiting for it.

No tool can block a worker past its timeout: a tool that blocks (a FIFO, a
dead NFS mount, a C extension that never returns) must not block the session
worker.  Each call runs on a daemon thread; the runtime waits at most the
tool's timeout, measured from the moment the call started, and meanwhile keeps
polling the run's abort signal (cancel requested, lease lost, wall-clock
budget spent).  When it gives up it asks the tool to stop (the call's cancel
event), waits a short grace for the tool's own answer (Bash kills its process
group and reports what it saw), and otherwise records the call ``timed_out``
or ``aborted`` with "outcome unknown" and moves on.  A thread that never
returns keeps nothing alive: it is a daemon, it no longer holds a pool slot,
and the lease heartbeat stops with the session (DESIGN.md section 4).

Call threads are reused (per-session cost, ``bench/loop``): starting a thread
costs a context-switch round trip (``Thread.start`` waits for the new thread
to run), which was a quarter of a zero-latency session.  A call thread that
finished parks for :data:`IDLE_S` seconds and takes the next call; one that
never returns is never reused.  Each call runs in a fresh :mod:`contextvars`
context, as on a new thread.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from datetime import datetime
from typing import Generic, TypeVar

from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.runtime.fanout.calls import CallJob, Execution, execute_call, not_run
from nahida_workers.tools.base import ToolRegistry

__all__ = [
    "ABORT_POLL_S",
    "GRACE_S",
    "CallThread",
    "abandoned_threads",
    "run_bounded",
    "timed_out",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between checks of the run's abort signal while a call runs.
ABORT_POLL_S = 0.25
#: Seconds a tool asked to stop gets to answer before the runtime stops waiting.
GRACE_S = 3.0

#: Outcome text of a call the runtime stopped waiting for.
TIMED_OUT_TEXT = (
    "tool timed out after {timeout:g} s and was abandoned; whether it had an effect "
    "before it stopped is unknown"
)
ABORTED_UNKNOWN_TEXT = (
    "aborted: the run was cancelled or out of time while the tool was still running; "
    "whether it had an effect is unknown"
)

#: Seconds a finished call thread waits for its next call before it exits.
IDLE_S = 30.0
#: Most call threads kept waiting for a call (more finish and exit).
MAX_IDLE = 64

_abandoned_lock = threading.Lock()
_abandoned = 0


class _Worker:
    """A daemon thread that runs one call after another, parked in ``_idle`` between calls."""

    def __init__(self, job: Callable[[], None], name: str) -> None:
        self._job: tuple[Callable[[], None], str] | None = (job, name)
        self._wake = threading.Semaphore(0)
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def give(self, job: Callable[[], None], name: str) -> None:
        self._job = (job, name)
        self._wake.release()

    def _loop(self) -> None:
        while True:
            assert self._job is not None
            (job, name), self._job = self._job, None
            self.thread.name = name
            contextvars.Context().run(job)  # never raises: CallThread._run catches all
            if not self._park():
                return

    def _park(self) -> bool:
        """Wait for the next call; False when none came within :data:`IDLE_S`."""
        with _idle_lock:
            if len(_idle) >= MAX_IDLE:
                return False
            _idle.append(self)
        if self._wake.acquire(timeout=IDLE_S):
            return True
        with _idle_lock:
            if self in _idle:  # nobody took it: exit
                _idle.remove(self)
                return False
        self._wake.acquire()  # taken just as it timed out: its call is on the way
        return True


_idle_lock = threading.Lock()
_idle: list[_Worker] = []


def _start(job: Callable[[], None], name: str) -> _Worker:
    """Run ``job`` on a parked call thread, or on a new one when none is parked."""
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is not None:
        worker.give(job, name)
        return worker
    worker = _Worker(job, name)
    worker.thread.start()
    return worker


def abandoned_threads() -> int:
    """How many call threads this process stopped waiting for (a gauge for logs and tests)."""
    with _abandoned_lock:
        return _abandoned


class CallThread(Generic[T]):
    """One callable on its own daemon thread, with an optional concurrency slot.

    Args:
        fn: what to run.
        name: the thread's name.
        slots: a semaphore limiting how many run at once (the local pool);
            the call waits for a slot before it starts.  A call the runtime
            abandons gives its slot back at once.
        monotonic: clock for :attr:`started_at` (seconds).
    """

    def __init__(
        self,
        fn: Callable[[], T],
        *,
        name: str,
        slots: threading.Semaphore | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.future: Future[T] = Future()
        self.started_at: float | None = None
        self._fn = fn
        self._slots = slots
        self._monotonic = monotonic
        self._holding = False
        self._lock = threading.Lock()
        self._abandoned = False
        self._name = name
        _start(self._run, name)

    def _run(self) -> None:
        if self._slots is not None:
            self._slots.acquire()
            with self._lock:
                if self._abandoned:  # given up before it started: never run it
                    self._slots.release()
                    self.future.cancel()
                    return
                self._holding = True
        self.started_at = self._monotonic()
        if not self.future.set_running_or_notify_cancel():
            self._release()
            return
        try:
            self.future.set_result(self._fn())
        except BaseException as exc:
            self.future.set_exception(exc)
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            if self._holding and self._slots is not None:
                self._slots.release()
            self._holding = False

    def abandon(self) -> None:
        """The runtime stopped waiting: free the slot; a thread still running is counted."""
        global _abandoned
        with self._lock:
            self._abandoned = True
        self._release()
        if not self.future.done() and self.started_at is not None:
            with _abandoned_lock:
                _abandoned += 1
            log.warning("tool thread %s abandoned while still running", self._name)

    def result(self, wait_s: float) -> T | None:
        """The result if it is there within ``wait_s`` seconds, else None.

        Raises:
            Exception: whatever the callable raised.
        """
        try:
            return self.future.result(timeout=max(wait_s, 0.0))
        except FutureTimeout:
            return None


def timed_out(call: ToolCall, job: CallJob, at: datetime, timeout_s: float) -> Execution:
    """The execution of a call the runtime gave up on at its timeout."""
    return not_run(
        call,
        job,
        status=ToolStatus.TIMED_OUT,
        content=TIMED_OUT_TEXT.format(timeout=timeout_s),
        code="timed_out",
        at=at,
        evidence={"timeout_s": timeout_s, "outcome": "unknown"},
    )


def run_bounded(
    registry: ToolRegistry,
    call: ToolCall,
    job: CallJob,
    now: Callable[[], datetime],
    *,
    monotonic: Callable[[], float] = time.monotonic,
    grace_s: float = GRACE_S,
) -> Execution:
    """Run one call on its own thread, bounded by its tool's timeout (seconds).

    The timeout counts from the call's start.  While it runs, ``job.cancel``
    and ``job.should_abort()`` are polled every :data:`ABORT_POLL_S`; either
    asks the tool to stop.  Never raises for a tool failure.

    Returns:
        The tool's own execution when it answers in time (or within
        ``grace_s`` after being asked to stop); otherwise a ``timed_out`` or
        ``aborted`` execution saying the outcome is unknown.
    """
    if job.cancel.is_set() or job.should_abort():  # never start a call of a run that is ending
        return not_run(
            call,
            job,
            status=ToolStatus.ABORTED,
            content="aborted: the run was cancelled or out of time before the call started",
            code="aborted",
            at=now(),
            evidence={"started": False},
        )
    tool = registry.get(call.name)
    timeout_s = tool.spec.timeout_s if tool is not None else 60.0
    stop = threading.Event()
    call_job = replace(job, cancel=stop)
    worker = CallThread(
        lambda: execute_call(registry, call, call_job, now),
        name=f"tool-{call.name}-{call.call_id}"[:60],
        monotonic=monotonic,
    )
    while True:
        started = worker.started_at if worker.started_at is not None else monotonic()
        remaining = started + timeout_s - monotonic()
        got = _poll(worker, call, job, now, min(max(remaining, 0.0), ABORT_POLL_S))
        if got is not None:
            return got
        aborting = job.cancel.is_set() or job.should_abort()
        if not aborting and monotonic() < started + timeout_s:
            continue
        stop.set()
        got = _poll(worker, call, job, now, grace_s)
        if got is not None:
            return got
        worker.abandon()
        return _given_up(call, job, now(), aborting=aborting, timeout_s=timeout_s)


def _given_up(
    call: ToolCall, job: CallJob, at: datetime, *, aborting: bool, timeout_s: float
) -> Execution:
    """The call did not answer after being asked to stop: aborted or timed out, outcome unknown."""
    if aborting:
        log.warning("call %s (%s): abandoned on abort", call.call_id, call.name)
        return not_run(
            call,
            job,
            status=ToolStatus.ABORTED,
            content=ABORTED_UNKNOWN_TEXT,
            code="aborted",
            at=at,
            evidence={"outcome": "unknown"},
        )
    log.warning("call %s (%s): timed out after %gs", call.call_id, call.name, timeout_s)
    return timed_out(call, job, at, timeout_s)


def _poll(
    worker: CallThread[Execution],
    call: ToolCall,
    job: CallJob,
    now: Callable[[], datetime],
    wait_s: float,
) -> Execution | None:
    try:
        return worker.result(wait_s)
    except Exception as exc:  # execute_call never raises; a bug in it might
        log.exception("call %s: the call thread failed", call.call_id)
        return not_run(
            call,
            job,
            status=ToolStatus.ERROR,
            content=f"{call.name} failed: {type(exc).__name__}: {exc}"[:500],
            code="internal",
            at=now(),
        )
