"""Graceful shutdown of a session worker: the drain flag (DESIGN.md section 8, shutdown).

SIGTERM makes Celery start a *warm* shutdown in the worker's main process:
it stops consuming (no new delivery is taken) and waits for the running
tasks.  Left alone, a session task would run its whole session -- up to its
wall-clock budget -- and a supervisor would escalate to SIGKILL first.

So the warm shutdown also raises a process-wide *drain* flag
(:func:`draining`).  Every owner checks it at each boundary of its run
(``runtime/ownership/driver.py``): a running tool finishes within its
timeout and its results commit, but no new provider turn, tool batch or stop
hook starts.  The owner commits a ``handover`` event, releases the lease
(compare-and-set) and its delivery puts its message back on the queue
(``Reject(requeue=True)`` on an ``acks_late`` task), so another worker
continues the session at once -- not after the lease TTL.  Then the worker
exits.

The flag is one byte of shared memory made before the pool starts
(``worker_init``), so the children of a prefork pool see their parent's
shutdown; raising it takes no lock, so it is safe inside a signal handler.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from celery.signals import worker_init, worker_shutting_down

__all__ = ["DrainFlag", "draining"]


class DrainFlag:
    """One byte of shared memory: inherited by forked children, raised once."""

    def __init__(self) -> None:
        self._byte: Any = multiprocessing.RawValue("b", 0)

    def raise_flag(self) -> None:
        """Raise the flag (no lock: safe in a signal handler)."""
        self._byte.value = 1

    def is_raised(self) -> bool:
        """True once :meth:`raise_flag` ran here or in a process sharing the flag (a fork)."""
        return bool(self._byte.value)


_flag: DrainFlag | None = None


def draining() -> bool:
    """True once this worker (or, in a prefork child, its parent) began its shutdown."""
    return _flag is not None and _flag.is_raised()


@worker_init.connect(weak=False)
def _make_flag_before_fork(**_: Any) -> None:
    # worker_init runs in the worker's main process before a prefork pool forks.
    global _flag
    if _flag is None:
        _flag = DrainFlag()


@worker_shutting_down.connect(weak=False)
def _drain_on_shutdown(**_: Any) -> None:
    # Sent by Celery's SIGTERM/SIGINT/SIGQUIT handlers in the main process, inside
    # the signal handler: no logging here (it takes locks); each owner logs its handover.
    if _flag is not None:
        _flag.raise_flag()
