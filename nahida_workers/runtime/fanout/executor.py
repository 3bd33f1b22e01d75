"""Tool executors: run one batch, return executions in provider order.

:class:`InlineExecutor` runs the calls one after the other in the session
worker, each bounded by its tool's timeout (``runtime/fanout/bounded.py``,
DESIGN.md section 5).  Fan-out executors (a local thread pool, the remote ``tools`` queue)
implement the same :class:`ToolExecutor` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from nahida_workers.core.ordering import Batch
from nahida_workers.runtime.fanout.bounded import GRACE_S, run_bounded
from nahida_workers.runtime.fanout.calls import CallJob, Execution
from nahida_workers.tools.base import ToolRegistry

if TYPE_CHECKING:
    from nahida_workers.runtime.fanout.prestart import PreStart

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

    def prestart(self, job: CallJob, registry: ToolRegistry) -> PreStart | None:
        """A streaming pre-start for the next provider turn, or None if not offered.

        DESIGN.md section 3 "Streaming pre-start": only an executor that can
        run calls while the session worker still reads the stream offers one.
        """
        ...


class InlineExecutor:
    """Runs every call one after the other, each on its own thread bounded by its timeout."""

    def __init__(self, now: Callable[[], datetime], *, grace_s: float = GRACE_S) -> None:
        self._now = now
        self._grace_s = grace_s

    def run_batch(
        self, batch: Batch, job: CallJob, registry: ToolRegistry, *, started: Any = None
    ) -> list[Execution]:
        """Execute the calls sequentially in provider order (no pre-start here)."""
        return [
            run_bounded(registry, call, job, self._now, grace_s=self._grace_s)
            for call in batch.calls
        ]

    def prestart(self, job: CallJob, registry: ToolRegistry) -> PreStart | None:
        """None: calls run only after their turn committed, one after the other."""
        return None
