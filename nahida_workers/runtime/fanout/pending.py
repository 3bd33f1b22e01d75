"""The calls a fan-out executor started and has not gathered yet.

Data only: the executor (:mod:`~nahida_workers.runtime.fanout.parallel`)
starts, gathers and aborts them; a streaming pre-start
(:mod:`~nahida_workers.runtime.fanout.prestart`) holds the ones it started
until its turn commits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from nahida_workers.core.messages import ToolCall
from nahida_workers.runtime.fanout.bounded import CallThread
from nahida_workers.runtime.fanout.calls import CallJob, Execution
from nahida_workers.tools.base import Placement

__all__ = ["Pending", "Slot"]


@dataclass
class Slot:
    """One started call: where it runs, under which executor epoch, and its deadline.

    Attributes:
        call / job: the call and the run it belongs to.
        placement: ``local`` (a thread here) or ``remote`` (the ``tools`` queue).
        executor_epoch: the executor epoch it was started under.
        submitted: monotonic second it was submitted.
        timeout_s: its tool's timeout, in seconds.
        cancel: set to ask a local call to stop.
        thread / task_id: the local thread or the remote task running it.
        execution: its result, once gathered (or timed out, or aborted).
    """

    call: ToolCall
    job: CallJob
    placement: Placement
    executor_epoch: int
    submitted: float
    timeout_s: float
    cancel: threading.Event
    thread: CallThread[Execution] | None = None
    task_id: str | None = None
    execution: Execution | None = None

    def deadline(self) -> float | None:
        """Monotonic second this call times out; None while a local call still queues."""
        if self.thread is not None:
            started = self.thread.started_at
            return None if started is None else started + self.timeout_s
        return self.submitted + self.timeout_s


@dataclass
class Pending:
    """Calls started and not yet gathered, in provider order."""

    slots: list[Slot] = field(default_factory=list)

    @property
    def call_ids(self) -> list[str]:
        """Ids of the started calls, in order."""
        return [s.call.call_id for s in self.slots]
