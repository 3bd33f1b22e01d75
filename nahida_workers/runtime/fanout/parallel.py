"""Fan-out: concurrency-safe calls in parallel, gathered in provider order.

DESIGN.md section 3 step 4 and section 5.  A parallel batch starts every call at
once -- ``remote`` ones as tasks on the ``tools`` queue, ``local`` ones in a
bounded thread pool inside the session worker -- and is gathered in provider
order, whatever order the calls finish in.  An exclusive call runs alone,
inline.  Both placements share one set of rules:

* a call that does not answer within its tool's timeout gets a ``timed_out``
  result and receipt; a remote task is revoked, a local one is asked to stop
  through its cancel event and abandoned (its thread no longer holds a pool
  slot).  Each call's deadline is its own (DESIGN.md section 5): a local call's
  counts from the moment its thread started it, a remote call's from its
  submission (the queue wait included: the session cannot see when a tool
  worker picked it up); a result already there when a deadline is checked is
  taken, so a call that finished in time is never reported ``timed_out``
  because an earlier call of its batch was slow;
* an exclusive call runs alone on its own thread, bounded the same way
  (``runtime/fanout/bounded.py``);
* the executor epoch: when the batch must be abandoned (cancel, lease lost,
  provider fallback during a streaming pre-start) the epoch is bumped and
  outstanding calls are revoked; any result produced for an older epoch
  becomes an ``aborted`` result -- never committed as a success, never shown
  to the model as one.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.ordering import Batch
from nahida_workers.core.payloads import ABORTED_TEXT
from nahida_workers.runtime.fanout.bounded import (
    ABORT_POLL_S,
    GRACE_S,
    CallThread,
    run_bounded,
    timed_out,
)
from nahida_workers.runtime.fanout.calls import CallJob, Execution, execute_call, not_run
from nahida_workers.runtime.fanout.pending import Pending, Slot
from nahida_workers.runtime.fanout.prestart import PreStart
from nahida_workers.tools.base import Placement, ToolRegistry

__all__ = ["FanOutExecutor", "RemoteTools", "remote_task_id"]

log = logging.getLogger(__name__)


class RemoteTools(Protocol):
    """The ``tools`` queue as a port (Celery in production, threads in tests).

    A remote execution returns ``(executor_epoch, Execution)``: the epoch it
    was submitted under comes back with the result.
    """

    def submit(self, call: ToolCall, job: CallJob, *, task_id: str, executor_epoch: int) -> None:
        """Publish one call."""
        ...

    def wait(self, task_id: str, timeout_s: float) -> tuple[int, Execution] | None:
        """The result, or None if it is not there within ``timeout_s`` seconds."""
        ...

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Ask workers to drop these tasks (best effort)."""
        ...


def remote_task_id(job: CallJob, call_id: str, executor_epoch: int) -> str:
    """Task id of a fanned-out call: run, call, fencing epoch, executor epoch."""
    return f"tool-{job.run_id}-{call_id}-f{job.epoch}-x{executor_epoch}"


class FanOutExecutor:
    """Runs batches: exclusive calls inline, parallel batches fanned out.

    Args:
        now: UTC timestamps for receipts.
        local_threads: size of the session worker's local pool.
        remote: the ``tools`` queue; None makes ``remote`` placement run locally
            (the embedded mode, where one process serves every queue).
        monotonic: seconds, for deadlines (tests may pass a fake).
        grace_s: seconds an exclusive call asked to stop gets to answer.
    """

    def __init__(
        self,
        *,
        now: Callable[[], datetime],
        local_threads: int = 8,
        remote: RemoteTools | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        grace_s: float = GRACE_S,
    ) -> None:
        self._now = now
        self._grace_s = grace_s
        self._slots = threading.BoundedSemaphore(local_threads)
        self._remote = remote
        self._monotonic = monotonic

    def close(self) -> None:
        """Nothing to stop: local calls run on daemon threads that end with their call."""

    def prestart(self, job: CallJob, registry: ToolRegistry) -> PreStart:
        """A pre-start that runs safe calls on this executor while the stream is open."""
        return PreStart(self, job, registry)

    # -- the ToolExecutor protocol -------------------------------------------------
    def run_batch(
        self,
        batch: Batch,
        job: CallJob,
        registry: ToolRegistry,
        *,
        started: Pending | None = None,
    ) -> list[Execution]:
        """Execute ``batch`` and gather its executions in provider order.

        ``started`` holds calls of this batch already running (streaming
        pre-start); they are gathered, not started again.
        """
        if not batch.parallel:
            return [
                run_bounded(
                    registry, call, job, self._now, monotonic=self._monotonic, grace_s=self._grace_s
                )
                for call in batch.calls
            ]
        running = {s.call.call_id: s for s in (started.slots if started else [])}
        missing = [c for c in batch.calls if c.call_id not in running]
        fresh = {s.call.call_id: s for s in self.start(missing, job, registry).slots}
        slots = [running.get(c.call_id) or fresh[c.call_id] for c in batch.calls]
        return self.gather(Pending(slots), job)

    # -- fan-out ---------------------------------------------------------------------
    def start(self, calls: Sequence[ToolCall], job: CallJob, registry: ToolRegistry) -> Pending:
        """Start fan-out-capable ``calls`` now (also used by streaming pre-start)."""
        pending = Pending()
        epoch = job.executor_epoch.value
        started = self._monotonic()
        for call in calls:
            tool = registry.get(call.name)
            placement = registry.placement_of(call.name)
            if tool is None or placement is None:
                raise ValueError(f"{call.name} cannot fan out")  # plan_batches never does this
            timeout_s = tool.spec.timeout_s
            slot = Slot(call, job, placement, epoch, started, timeout_s, threading.Event())
            if placement is Placement.REMOTE and self._remote is not None:
                task_id = remote_task_id(job, call.call_id, epoch)
                try:
                    self._remote.submit(call, job, task_id=task_id, executor_epoch=epoch)
                    slot.task_id = task_id
                except Exception as exc:  # broker down: read-only calls run here instead
                    log.warning(
                        "call %s: tools queue unavailable (%s); running locally", call.call_id, exc
                    )
            if slot.task_id is None:
                call_job = replace(job, cancel=slot.cancel)
                slot.thread = CallThread(
                    functools.partial(execute_call, registry, call, call_job, self._now),
                    name=f"tool-{call.name}-{call.call_id}"[:60],
                    slots=self._slots,
                    monotonic=self._monotonic,
                )
            pending.slots.append(slot)
        return pending

    def gather(self, pending: Pending, job: CallJob) -> list[Execution]:
        """Wait for every started call, in provider order; never raises for a tool."""
        out: list[Execution] = []
        for index, slot in enumerate(pending.slots):
            while slot.execution is None:
                if job.should_abort() or job.cancel.is_set():
                    self.abort(pending.slots[index:])
                    break
                deadline = slot.deadline()
                remaining = ABORT_POLL_S if deadline is None else deadline - self._monotonic()
                if remaining <= 0:
                    self._poll(slot, 0.0)  # it may have answered while we waited on others
                    if slot.execution is None:
                        self._time_out(slot)
                    break
                self._poll(slot, min(remaining, ABORT_POLL_S))
            assert slot.execution is not None
            out.append(slot.execution)
        return out

    def abort(self, slots: Sequence[Slot], *, bump: bool = True) -> None:
        """Revoke or cancel every slot still running; with ``bump``, a new epoch.

        Results that already arrived keep their value (they came in the
        current epoch); everything still outstanding becomes ``aborted``.
        Without ``bump`` only these slots are aborted (calls dropped from a
        pre-start); other calls in flight keep counting.
        """
        for slot in slots:
            if slot.execution is None:
                self._poll(slot, 0.0)
        if bump:
            for job in {id(s.job): s.job for s in slots}.values():
                job.executor_epoch.bump()
        outstanding = [s for s in slots if s.execution is None]
        for slot in outstanding:
            slot.cancel.set()
            if slot.thread is not None:
                slot.thread.abandon()
        task_ids = [s.task_id for s in outstanding if s.task_id is not None]
        if task_ids and self._remote is not None:
            self._remote.revoke(task_ids)
        for slot in outstanding:
            self._settle(slot, None)

    def discard(self, pending: Pending, keep: Callable[[ToolCall], bool]) -> Pending:
        """Split off pre-started calls the committed turn does not hold (aborting them)."""
        kept = [s for s in pending.slots if keep(s.call)]
        dropped = [s for s in pending.slots if not keep(s.call)]
        if dropped:
            self.abort(dropped, bump=False)
            for slot in dropped:  # even one that had finished is never used
                slot.execution = None
                self._settle(slot, None)
        return Pending(kept)

    # -- internals --------------------------------------------------------------------
    def _poll(self, slot: Slot, wait_s: float) -> None:
        if slot.thread is not None:
            try:
                execution = slot.thread.result(wait_s)
            except Exception as exc:  # execute_call never raises; a bug in it might
                execution = self._failed(slot, exc)
            if execution is not None:
                self._settle(slot, (slot.executor_epoch, execution))
            return
        assert self._remote is not None and slot.task_id is not None
        try:
            got = self._remote.wait(slot.task_id, wait_s)
        except Exception as exc:  # the tool worker raised, or the backend failed
            got = (slot.executor_epoch, self._failed(slot, exc))
        if got is not None:
            self._settle(slot, got)

    def _settle(self, slot: Slot, got: tuple[int, Execution] | None) -> None:
        """Record a slot's execution; anything from an older epoch is aborted."""
        current = slot.job.executor_epoch.value
        if got is not None and got[0] == current:
            slot.execution = got[1]
            return
        if got is not None:
            log.info(
                "call %s: result of executor epoch %d arrived in epoch %d; aborted",
                slot.call.call_id,
                got[0],
                current,
            )
        slot.execution = not_run(
            slot.call,
            slot.job,
            status=ToolStatus.ABORTED,
            content=ABORTED_TEXT,
            code="aborted",
            at=self._now(),
        )

    def _time_out(self, slot: Slot) -> None:
        slot.cancel.set()
        if slot.thread is not None:
            slot.thread.abandon()
        if slot.task_id is not None and self._remote is not None:
            self._remote.revoke([slot.task_id])
        slot.execution = timed_out(slot.call, slot.job, self._now(), slot.timeout_s)

    def _failed(self, slot: Slot, exc: BaseException) -> Execution:
        return not_run(
            slot.call,
            slot.job,
            status=ToolStatus.ERROR,
            content=f"{slot.call.name} failed in the tool pool: {type(exc).__name__}: {exc}"[:500],
            code="tool_worker_error",
            at=self._now(),
        )
