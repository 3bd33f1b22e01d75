"""The tool worker's task body and the session worker's client for it (the ``tools`` queue).

Only read-only, concurrency-safe tools are ever sent here (DESIGN.md section 5):
their at-least-once delivery is harmless, so a tool worker killed mid-call
(SIGKILL) simply has the task redelivered and run again, and the session
worker still gathers exactly one result per call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import Celery

from nahida_workers.constants import (
    EPOCH_CHECK_RETRY_S,
    RUN_TOOL_CALL,
    TOOL_RESULT_KEY_PREFIX,
    TOOL_RESULT_TTL_S,
)
from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.payloads import ABORTED_TEXT
from nahida_workers.core.records import SessionRecord
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.logs import bind_log_context
from nahida_workers.ports import Clock, LedgerReader
from nahida_workers.runtime.commits.outage import read_through_outage
from nahida_workers.runtime.fanout.bounded import run_bounded
from nahida_workers.runtime.fanout.calls import (
    CallJob,
    Execution,
    execution_from_json,
    execution_to_json,
    not_run,
)
from nahida_workers.runtime.wiring import Fleet, build_registry, redis_client
from nahida_workers.settings import TOOLS_QUEUE, Settings
from nahida_workers.tools.base import ToolRegistry

__all__ = [
    "CeleryRemoteTools",
    "ToolResultChannel",
    "fenced_session",
    "result_channel",
    "run_tool_call",
    "tool_payload",
]

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


# The tool worker retries its epoch check through a ledger outage for
# EPOCH_CHECK_RETRY_S before it answers "not run" (the session would otherwise
# wait out the tool's whole timeout for a call that never ran).


class ToolResultChannel:
    """Where a tool worker hands a result back: one Redis list per task id.

    ``RPUSH`` + ``EXPIRE`` by the tool worker, ``BLPOP`` by the session
    worker.  Celery's Redis result backend is not used for this: its pubsub
    consumer keeps a subscription per task that is never drained when a
    result is read directly, and a session worker fanning out thousands of
    calls grew without bound (celery/celery#6963).  A redelivered task pushes
    a second copy that nobody pops; it expires with the key.
    """

    def __init__(self, client: Any, *, prefix: str = "") -> None:
        self._client = client
        self._prefix = prefix + TOOL_RESULT_KEY_PREFIX

    def push(self, task_id: str, value: dict[str, Any]) -> None:
        """Hand ``value`` to the waiting session worker."""
        key = self._prefix + task_id
        pipe = self._client.pipeline()
        pipe.rpush(key, json.dumps(value))
        pipe.expire(key, TOOL_RESULT_TTL_S)
        pipe.execute()

    def pop(self, task_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The result, waiting at most ``timeout_s`` seconds (0: do not wait)."""
        key = self._prefix + task_id
        if timeout_s <= 0:
            raw = self._client.lpop(key)
        else:
            got = self._client.blpop([key], timeout=max(timeout_s, 0.01))
            raw = got[1] if got else None
        return None if raw is None else dict(json.loads(raw))


_registries: dict[tuple[int, tuple[str, ...], float], tuple[Settings, ToolRegistry]] = {}
_channels: dict[int, tuple[Settings, ToolResultChannel]] = {}


def _registry(tools: tuple[str, ...], bash_timeout_s: float, settings: Settings) -> ToolRegistry:
    """The registry a session with these tools uses (built once per worker process)."""
    key = (id(settings), tools, bash_timeout_s)
    if key not in _registries:
        registry = build_registry(tools, settings, bash_timeout_s=bash_timeout_s)
        _registries[key] = (settings, registry)  # the settings kept alive: ids stay unique
    return _registries[key][1]


def result_channel(settings: Settings) -> ToolResultChannel:
    """The Redis result channel of ``settings`` (one per worker process)."""
    if id(settings) not in _channels:
        channel = ToolResultChannel(redis_client(settings), prefix=settings.redis_key_prefix)
        _channels[id(settings)] = (settings, channel)
    return _channels[id(settings)][1]


def fenced_session(
    ledger: LedgerReader, session_id: str, *, clock: Clock | None = None
) -> SessionRecord | None:
    """The session row for the epoch check, retried through a short ledger outage.

    Raises:
        LedgerUnavailableError: still unavailable after ``EPOCH_CHECK_RETRY_S``.
    """
    return read_through_outage(
        lambda: ledger.get_session(session_id), within_s=EPOCH_CHECK_RETRY_S, clock=clock
    )


def run_tool_call(
    current: Fleet, payload: dict[str, Any], *, task_id: str, channel: ToolResultChannel
) -> dict[str, Any]:
    """Run one fanned-out call; push ``{"executor_epoch", "execution"}`` to ``channel``.

    The body of the ``nahida.run_tool_call`` task (``celery/tasks.py``).  The
    payload carries the session's fencing epoch: a call sent by an owner that
    has since lost the session is not run (it comes back ``aborted``).
    """
    bind_log_context(session_id=payload["session_id"], run_id=payload["run_id"], trace_id=None)
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
    registry = _registry(job.tools, job.bash_timeout_s, current.settings)
    try:
        session = fenced_session(current.ledger, job.session_id, clock=current.clock)
    except LedgerUnavailableError as exc:
        log.warning(
            "call %s: ledger unavailable for the epoch check (%s); not run", call.call_id, exc
        )
        execution = not_run(
            call,
            job,
            status=ToolStatus.ERROR,
            content="The tool did not run: the ledger was unavailable. Try the call again.",
            code="ledger_unavailable",
            at=current.clock.now(),
        )
    else:
        execution = _fenced_execution(current, registry, call, job, session)
    value = {"executor_epoch": payload["executor_epoch"], "execution": execution_to_json(execution)}
    channel.push(task_id, value)
    return value


def _fenced_execution(
    current: Fleet,
    registry: ToolRegistry,
    call: ToolCall,
    job: CallJob,
    session: SessionRecord | None,
) -> Execution:
    """Run the call iff the task's fencing epoch is the session's and the tool may fan out."""
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
        # Bounded here too: a stuck tool must not hold a tool-worker thread.
        execution = run_bounded(registry, call, job, current.clock.now)
    return execution


class CeleryRemoteTools:
    """The :class:`~nahida_workers.runtime.fanout.parallel.RemoteTools` port over Celery."""

    def __init__(self, celery_app: Celery, channel: ToolResultChannel) -> None:
        self._app = celery_app
        self._channel = channel

    def submit(self, call: ToolCall, job: CallJob, *, task_id: str, executor_epoch: int) -> None:
        """Publish the call on the ``tools`` queue under a deterministic task id."""
        self._app.send_task(
            RUN_TOOL_CALL,
            args=[tool_payload(call, job, executor_epoch)],
            task_id=task_id,
            queue=TOOLS_QUEUE,
            ignore_result=True,  # the result comes back on the ToolResultChannel
        )

    def wait(self, task_id: str, timeout_s: float) -> tuple[int, Execution] | None:
        """The task's result if it arrives within ``timeout_s`` seconds, else None."""
        value = self._channel.pop(task_id, timeout_s)
        if value is None:
            return None
        return int(value["executor_epoch"]), execution_from_json(value["execution"])

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Broadcast a revoke: a worker that has not started a task drops it."""
        self._app.control.revoke(list(task_ids))
