"""Which tool executor a session worker uses (issue 3 adds the fan-out ones)."""

from __future__ import annotations

from celery import Celery

from nahida_workers.ports import SystemClock
from nahida_workers.runtime.executor import InlineExecutor, ToolExecutor
from nahida_workers.settings import Settings

__all__ = ["executor_for"]


def executor_for(app: Celery, settings: Settings) -> ToolExecutor:
    """The executor for this worker process."""
    return InlineExecutor(SystemClock().now)
