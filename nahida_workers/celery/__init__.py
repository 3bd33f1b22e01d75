"""The Celery adapters: app factory, task queue, remote tools, embedded worker.

``make_celery(settings)`` builds an app with every nahida task registered;
``tasks/`` (what ``celery -A tasks`` loads) holds one such app.  Nothing in
``nahida_workers`` imports ``tasks``.  Submodules are imported on first use
so that importing this package costs nothing (CLI start-up).

==================  ======================================================
module              owns
==================  ======================================================
app.py              :func:`make_celery`, the per-app process state, CeleryTaskQueue
tasks.py            the task definitions and their delivery options
sessions.py         the ``run_session`` body (follow-ups, retries)
tools.py            the ``run_tool_call`` body, its result channel, CeleryRemoteTools
maintenance.py      the sweep and the broker-restart check
executors.py        the fan-out executor of a session worker
config.py           the Celery ``conf`` derived from the settings
broker.py           the Redis transport with a kombu fault worked around
embedded.py         worker threads inside the calling process
shutdown.py         the drain flag a warm shutdown (SIGTERM) raises for every owner
==================  ======================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nahida_workers.celery.app import CeleryTaskQueue, make_celery, process_of
    from nahida_workers.celery.embedded import embedded_worker

__all__ = ["CeleryTaskQueue", "embedded_worker", "make_celery", "process_of"]

_HOMES = {
    "CeleryTaskQueue": "nahida_workers.celery.app",
    "make_celery": "nahida_workers.celery.app",
    "process_of": "nahida_workers.celery.app",
    "embedded_worker": "nahida_workers.celery.embedded",
}


def __getattr__(name: str) -> Any:
    """Import the public names lazily (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
