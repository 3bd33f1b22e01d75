"""The tool executor of a session worker process (DESIGN.md section 5)."""

from __future__ import annotations

from celery import Celery

from nahida_workers.ports import SystemClock
from nahida_workers.runtime.fanout.executor import ToolExecutor
from nahida_workers.runtime.fanout.parallel import FanOutExecutor
from nahida_workers.settings import Settings

__all__ = ["executor_for"]


def executor_for(app: Celery, settings: Settings) -> ToolExecutor:
    """Fan-out executor: remote calls on the ``tools`` queue unless disabled.

    With ``remote_tools`` off (the embedded mode, where one process serves
    every queue) ``remote`` placement runs in the local pool instead.
    """
    from nahida_workers.celery.tools import CeleryRemoteTools, ToolResultChannel
    from nahida_workers.runtime.wiring import redis_client

    remote = None
    if settings.remote_tools:
        channel = ToolResultChannel(redis_client(settings), prefix=settings.redis_key_prefix)
        remote = CeleryRemoteTools(app, channel)
    return FanOutExecutor(
        now=SystemClock().now, local_threads=settings.local_tool_threads, remote=remote
    )
