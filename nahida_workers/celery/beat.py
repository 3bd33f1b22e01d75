"""Beat's scheduler: control work is decided in beat's own loop (DESIGN.md sections 1 and 8).

``celery -A tasks beat`` uses :class:`LedgerScheduler` (``beat_scheduler``
in ``celery/config.py``).  Its two entries -- the schedule tick every
``NAHIDA_SCHEDULE_TICK_S`` and the sweep every ``NAHIDA_SWEEPER_INTERVAL_S``
-- are not sent to a queue: beat runs their bodies itself, each in a thread
of its own, so

* a fire is decided and recorded when it is due, however long the
  ``sessions`` queue is (a tick sent there used to wait behind the whole
  backlog; its sessions still queue behind it, which is fair);
* the sweeper (outbox re-publish, re-dispatch of abandoned sessions, release
  of sessions parked by their admission cap, and whatever else
  :func:`~nahida_workers.celery.maintenance.sweep` does) never waits for a
  worker slot either;
* a slow sweep never delays a tick, and a slow fire dispatch never delays
  the sweep.

The pattern is django-celery-beat's ``DatabaseScheduler`` and
celery-redbeat's ``RedBeatScheduler``: a ``celery.beat.Scheduler``
subclass named by configuration.  Beat keeps no state of its own: each
decision is a ledger row behind a compare-and-set, so two beats (or a
restarted one) decide every fire once, and no ``-s`` schedule file is read
or written.

A tick still running when the next one is due gets company (up to
:data:`MAX_CONCURRENT`): concurrent ticks are safe for the same reason two
beats are, and a fire with many repositories does not hold up the other
schedules' decisions.  A sweep still running is not doubled: the next one
is skipped.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery.beat import Scheduler
from celery.schedules import schedstate, schedule

from nahida_workers.constants import SCHEDULE_TICK, SWEEP

if TYPE_CHECKING:
    from nahida_workers.runtime.wiring import Fleet

__all__ = [
    "CONTROL_JOBS",
    "MAX_CONCURRENT",
    "ControlThreads",
    "LedgerScheduler",
    "aligned",
]

log = logging.getLogger(__name__)

#: Seconds :meth:`LedgerScheduler.close` waits for control work in flight.
CLOSE_WAIT_S = 10.0
#: Seconds after each boundary an :class:`aligned` entry runs (past clock jitter).
ALIGN_AFTER_S = 0.02


def _tick(fleet: Fleet) -> dict[str, Any]:
    from nahida_workers.schedules.scheduler import build_scheduler

    return build_scheduler(fleet).tick().as_dict()


def _sweep(fleet: Fleet) -> dict[str, Any]:
    from nahida_workers.celery.maintenance import sweep

    return sweep(fleet)


#: The control jobs beat runs itself, by task name (the same bodies as the tasks).
CONTROL_JOBS: Mapping[str, Callable[[Fleet], dict[str, Any]]] = {
    SCHEDULE_TICK: _tick,
    SWEEP: _sweep,
}
#: How many runs of one control job may be in flight at once.
MAX_CONCURRENT: Mapping[str, int] = {SCHEDULE_TICK: 4, SWEEP: 1}


def _did_something(result: object) -> bool:
    """Whether a control job's summary holds anything but empty values and False."""
    if isinstance(result, Mapping):
        return any(_did_something(v) for v in result.values())
    if isinstance(result, list | tuple | set):
        return bool(result)
    return bool(result) and result is not False


class ControlThreads:
    """Runs control jobs in threads, at most ``limit`` runs of one job at once.

    A run that would exceed the limit is skipped (logged): the job is
    periodic, and the next run does the same work.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, set[threading.Thread]] = {}

    def start(self, name: str, body: Callable[[], object], *, limit: int) -> bool:
        """Start ``body`` in a daemon thread unless ``limit`` runs of ``name`` are in flight.

        Returns:
            True if it started.
        """
        with self._lock:
            running = self._running.setdefault(name, set())
            if len(running) >= limit:
                log.warning("control job %s: %d run(s) still in flight; skipped", name, limit)
                return False
            thread = threading.Thread(
                target=self._run, args=(name, body), name=f"control-{name}", daemon=True
            )
            running.add(thread)
        thread.start()
        return True

    def _run(self, name: str, body: Callable[[], object]) -> None:
        started = time.monotonic()
        try:
            result = body()
        except Exception:  # the next run tries again; beat itself must go on
            log.exception("control job %s failed", name)
        else:
            took = time.monotonic() - started
            # Most runs decide nothing: say so only at debug level.
            level = logging.INFO if _did_something(result) else logging.DEBUG
            log.log(level, "control job %s done in %.3fs: %s", name, took, result)
        finally:
            with self._lock:
                self._running.get(name, set()).discard(threading.current_thread())

    def in_flight(self) -> int:
        """How many control runs are in flight now."""
        with self._lock:
            return sum(len(threads) for threads in self._running.values())

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for the runs in flight."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = [t for running in self._running.values() for t in running]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class aligned(schedule):  # type: ignore[misc]  # named like Celery's schedule classes
    """Every ``run_every`` seconds at whole multiples of it since the Unix epoch.

    Interval fires fall on such multiples (``schedules/timing.py``), cron
    fires on whole minutes: a tick aligned to them (plus :data:`ALIGN_AFTER_S`)
    decides a fire right after it comes due instead of up to a whole tick
    later, as a tick counted from beat's start would.
    """

    def is_due(self, last_run_at: datetime) -> schedstate:
        """Due when a boundary passed since ``last_run_at``; next check at the next boundary."""
        period_s = self.run_every.total_seconds()
        now_s = time.time()
        last = last_run_at if last_run_at.tzinfo else last_run_at.replace(tzinfo=UTC)
        boundary_s = math.floor((now_s - ALIGN_AFTER_S) / period_s) * period_s + ALIGN_AFTER_S
        due = last.timestamp() < boundary_s
        return schedstate(is_due=due, next=max(0.0, boundary_s + period_s - now_s))


class LedgerScheduler(Scheduler):  # type: ignore[misc]
    """``celery.beat.Scheduler`` that runs the control jobs in beat (see the module doc).

    Entries naming a task of :data:`CONTROL_JOBS` run here, on this app's
    fleet; any other entry is sent as usual.  Nothing is persisted by beat:
    the ledger holds every schedule's cursor and decision.
    """

    #: The control jobs this scheduler runs itself, by task name.
    jobs: Mapping[str, Callable[[Fleet], dict[str, Any]]] = CONTROL_JOBS

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("schedule_filename", None)  # nothing to persist: the ledger decides
        self.control = ControlThreads()
        super().__init__(app, *args, **kwargs)

    def _fleet(self) -> Fleet:
        # ``app.nahida`` is the app's CeleryProcess (celery/app.py, which imports this module).
        fleet: Fleet = self.app.nahida.fleet()
        return fleet

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        """Run a control entry here; send any other entry as Celery's scheduler does."""
        job = self.jobs.get(entry.task)
        if job is None:
            super().apply_entry(entry, producer=producer)
            return
        log.info("Scheduler: Running due control job %s (%s) in beat", entry.name, entry.task)
        self.control.start(
            entry.task, lambda: job(self._fleet()), limit=MAX_CONCURRENT.get(entry.task, 1)
        )

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kw: Any) -> Any:
        """A control entry is run here (``celery beat`` remote ``run``); others are sent."""
        if entry.task not in self.jobs:
            return super().apply_async(entry, producer=producer, advance=advance, **kw)
        entry = self.reserve(entry) if advance else entry
        self.apply_entry(entry, producer)
        return None

    def close(self) -> None:
        """Let control work in flight finish (up to :data:`CLOSE_WAIT_S`), then close."""
        self.control.join(CLOSE_WAIT_S)
        super().close()

    @property
    def info(self) -> str:
        """What ``celery beat`` prints as its scheduler's storage."""
        return "the ledger (control jobs run in beat; no schedule file)"
