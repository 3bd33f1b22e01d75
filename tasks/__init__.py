"""The Celery app for ``celery -A tasks worker -Q sessions`` (or ``-Q tools``, ``beat``).

The app and its tasks come from :func:`nahida_workers.celery.make_celery`;
nothing is read from the environment at import time (the settings load when
Celery first needs its configuration).  The submodules name the tasks.
"""

from nahida_workers.celery.app import make_celery

app = make_celery()

from tasks import maintenance, schedules, sessions, tools  # noqa: E402, F401

__all__ = ["app"]
