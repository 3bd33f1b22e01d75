"""Celery app and thin tasks: ``celery -A tasks worker -Q sessions`` (or ``-Q tools``)."""

from tasks import maintenance, schedules, sessions, tools  # noqa: F401  (register the tasks)
from tasks.app import app

__all__ = ["app"]
