"""The tool worker task and the session worker's client for it (the ``tools`` queue).

Only read-only, concurrency-safe tools are ever sent here (issue 3 item 1):
their at-least-once delivery is harmless, so a tool worker killed mid-call
(SIGKILL) simply has the task redelivered and run again, and the session
worker still gathers exactly one result per call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import ABORTED_TEXT
from nahida_workers.runtime.calls import (
    CallJob,
    Execution,
    execute_call,
    execution_from_json,
    execution_to_json,
    not_run,
)
from nahida_workers.runtime.wiring import build_registry
from nahida_workers.settings import TOOLS_QUEUE
from tasks.app import app, fleet, settings
from tasks.celeryconfig import RUN_TOOL_CALL

__all__ = ["CeleryRemoteTools", "run_tool_call"]

log = logging.getLogger(__name__)


def tool_payload(call: ToolCall, job: CallJob, executor_epoch: int) -> dict[str, Any]:
    """What a tool task carries: the call, where it runs, and both epochs."""
    return {
        "run_id": job.run_id,
        "session_id": job.session_id,
        "call": call.model_dump(mode="json"),
        "workspace": str(job.workspace),
        "epoch": job.epoch,
        "executor_epoch": executor_epoch,
        "max_output_bytes": job.max_output_bytes,
        "tools": list(job.tools),
        "bash_timeout_s": job.bash_timeout_s,
    }


@app.task(name=RUN_TOOL_CALL, acks_late=True, reject_on_worker_lost=True)
def run_tool_call(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one fanned-out call; return ``{"executor_epoch", "execution"}``.

    The task carries the session's fencing epoch: a call sent by an owner that
    has since lost the session is not run (it comes back ``aborted``).
    """
    current = fleet()
    call = ToolCall.model_validate(payload["call"])
    job = CallJob(
        run_id=payload["run_id"],
        workspace=Path(payload["workspace"]),
        epoch=int(payload["epoch"]),
        max_output_bytes=int(payload["max_output_bytes"]),
        session_id=payload["session_id"],
        tools=tuple(payload["tools"]),
        bash_timeout_s=float(payload["bash_timeout_s"]),
    )
    session = current.ledger.get_session(job.session_id)
    registry = build_registry(job.tools, settings(), bash_timeout_s=job.bash_timeout_s)
    tool = registry.get(call.name)
    if session is None or session.lease_epoch != job.epoch:
        log.warning("call %s: fencing epoch %s is stale; not run", call.call_id, job.epoch)
        execution = not_run(
            call,
            job,
            status=ToolStatus.ABORTED,
            content=ABORTED_TEXT,
            code="stale_epoch",
            at=current.clock.now(),
        )
    elif tool is None or not tool.spec.may_fan_out:
        execution = not_run(
            call,
            job,
            status=ToolStatus.ERROR,
            code="not_fan_out",
            content=f"{call.name} may not run on the tools queue",
            at=current.clock.now(),
        )
    else:
        execution = execute_call(registry, call, job, current.clock.now)
    return {"executor_epoch": payload["executor_epoch"], "execution": execution_to_json(execution)}


class CeleryRemoteTools:
    """The :class:`~nahida_workers.runtime.fanout.RemoteTools` port over Celery."""

    def __init__(self, celery_app: Celery) -> None:
        self._app = celery_app

    def submit(self, call: ToolCall, job: CallJob, *, task_id: str, executor_epoch: int) -> None:
        """Publish the call on the ``tools`` queue under a deterministic task id."""
        self._app.send_task(
            RUN_TOOL_CALL,
            args=[tool_payload(call, job, executor_epoch)],
            task_id=task_id,
            queue=TOOLS_QUEUE,
        )

    def wait(self, task_id: str, timeout_s: float) -> tuple[int, Execution] | None:
        """The task's result if it arrives within ``timeout_s`` seconds, else None.

        Raises:
            Exception: the task itself failed (the caller turns it into an error result).
        """
        result = AsyncResult(task_id, app=self._app)
        if timeout_s <= 0 and not result.ready():
            return None
        try:
            value = result.get(
                timeout=max(timeout_s, 0.001), propagate=True, disable_sync_subtasks=False
            )
        except CeleryTimeout:
            return None
        result.forget()
        return int(value["executor_epoch"]), execution_from_json(value["execution"])

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Broadcast a revoke: a worker that has not started a task drops it."""
        self._app.control.revoke(list(task_ids))
