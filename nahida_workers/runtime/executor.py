"""Tool executors: run one batch, return executions in provider order.

Issue 2 needs only :class:`InlineExecutor` (sequential, in the session
worker).  Fan-out executors (a local thread pool, the remote ``tools`` queue)
implement the same :class:`ToolExecutor` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.core.ordering import Batch
from nahida_workers.runtime.calls import CallJob, Execution, execute_call
from nahida_workers.tools.base import ToolRegistry

__all__ = ["InlineExecutor", "ToolExecutor"]


class ToolExecutor(Protocol):
    """Runs the calls of one batch.

    Returns one :class:`Execution` per call, in the batch's (provider) order,
    whatever order they finished in.  Never raises for a tool failure.
    """

    def run_batch(
        self, batch: Batch, job: CallJob, registry: ToolRegistry, *, started: Any = None
    ) -> list[Execution]:
        """Execute ``batch`` and gather its results in provider order.

        ``started``: calls of the batch already running (streaming pre-start).
        """
        ...


class InlineExecutor:
    """Runs every call in the calling thread, one after the other."""

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now

    def run_batch(
        self, batch: Batch, job: CallJob, registry: ToolRegistry, *, started: Any = None
    ) -> list[Execution]:
        """Execute the calls sequentially in provider order (no pre-start here)."""
        return [execute_call(registry, call, job, self._now) for call in batch.calls]
