"""Celery worker threads inside the calling process (the embedded mode).

Same app, same tasks, same runtime code path as ``celery -A tasks worker``;
only the URLs differ (in-memory broker and result backend, fakeredis for the
lease, SQLite for the ledger).  Celery's own embedded worker
(``celery.contrib.testing.worker.start_worker``) runs the consumer in a thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from celery import Celery
from celery.contrib.testing.worker import start_worker

from nahida_workers.settings import SESSIONS_QUEUE, TOOLS_QUEUE

__all__ = ["embedded_worker"]


@contextmanager
def embedded_worker(
    app: Celery,
    *,
    concurrency: int = 4,
    queues: Sequence[str] = (SESSIONS_QUEUE, TOOLS_QUEUE),
    shutdown_timeout_s: float = 60.0,
) -> Iterator[None]:
    """Run a thread-pool worker consuming ``queues`` until the block exits."""
    with start_worker(
        app,
        concurrency=concurrency,
        pool="threads",
        perform_ping_check=False,
        shutdown_timeout=shutdown_timeout_s,
        queues=list(queues),
        loglevel="WARNING",
    ):
        yield
