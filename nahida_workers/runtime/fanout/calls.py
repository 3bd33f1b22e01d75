"""Executing one tool call and writing its receipt -- the same code on every path.

The inline executor, the local thread pool and the remote tool worker all
call :func:`execute_call`, so a call behaves the same wherever it runs: the
tool is looked up, a call whose arguments did not parse or whose tool is
unknown gets an error the model can correct without anything being run, and
every execution ends with one :class:`ExecutionReceipt`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nahida_workers.core.events import (
    EvidenceKind,
    ExecutionReceipt,
    ToolStatus,
    VerificationStatus,
    input_fingerprint,
)
from nahida_workers.core.loop import CallResult
from nahida_workers.core.messages import ToolCall
from nahida_workers.core.receipts import idempotency_key, verification_for
from nahida_workers.tools.base import ToolContext, ToolRegistry
from nahida_workers.tools.runner import run_tool
from nahida_workers.worker_secrets import redact

__all__ = [
    "CallJob",
    "Execution",
    "ExecutorEpoch",
    "execute_call",
    "execution_from_json",
    "execution_to_json",
    "idempotency_key",
    "not_run",
]

log = logging.getLogger(__name__)


class ExecutorEpoch:
    """A counter bumped whenever in-flight calls must no longer count."""

    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    @property
    def value(self) -> int:
        """The current epoch."""
        with self._lock:
            return self._value

    def bump(self) -> int:
        """Move to a new epoch; returns it."""
        with self._lock:
            self._value += 1
            return self._value


@dataclass(frozen=True)
class CallJob:
    """Where and under which identity calls of one run execute.

    Attributes:
        run_id: the run.
        workspace: absolute workspace root.
        epoch: the session's fencing epoch of the owner that started the call.
        max_output_bytes: cap on a result the model sees, in bytes.
        cancel: set to ask running tools to stop.
        session_id: the session (remote tool workers check its fencing epoch).
        tools: tool names of the session (a remote worker builds the same registry).
        bash_timeout_s: the session's Bash timeout, in seconds.
        should_abort: polled while a batch is gathered; True (cancel requested,
            lease lost) bumps the executor epoch and aborts what is outstanding.
        executor_epoch: this delivery's executor epoch (one per run owner).
    """

    run_id: str
    workspace: Path
    epoch: int
    max_output_bytes: int = 64 * 1024
    cancel: threading.Event = field(default_factory=threading.Event)
    session_id: str = ""
    tools: tuple[str, ...] = ()
    bash_timeout_s: float = 120.0
    should_abort: Callable[[], bool] = field(default=lambda: False)
    executor_epoch: ExecutorEpoch = field(default_factory=lambda: ExecutorEpoch())


@dataclass(frozen=True)
class Execution:
    """One executed (or refused) call: the result to commit and its receipt."""

    result: CallResult
    receipt: ExecutionReceipt


def not_run(
    call: ToolCall,
    job: CallJob,
    *,
    status: ToolStatus,
    content: str,
    code: str,
    at: datetime,
    evidence_kind: EvidenceKind = EvidenceKind.NONE,
    evidence: dict[str, Any] | None = None,
) -> Execution:
    """An execution for a call that did not (or did not finish to) run.

    ``code`` goes into the receipt evidence as ``error_code``, with ``evidence``.
    """
    receipt = ExecutionReceipt(
        run_id=job.run_id,
        call_id=call.call_id,
        tool_name=call.name,
        status=status,
        started_at=at,
        finished_at=at,
        input_fingerprint=call.fingerprint,
        evidence={"error_code": code, **(evidence or {})},
        evidence_kind=evidence_kind,
        verification_status=VerificationStatus.NOT_APPLICABLE,
        idempotency_key=idempotency_key(job.run_id, call.call_id),
        epoch=job.epoch,
    )
    result = CallResult(call.call_id, call.name, status, content, evidence_kind.value)
    return Execution(result, receipt)


def execute_call(
    registry: ToolRegistry, call: ToolCall, job: CallJob, now: Callable[[], datetime]
) -> Execution:
    """Run ``call`` once (or refuse it) and build its receipt.

    Never raises for a tool failure: an unknown tool, unparsable arguments, a
    schema violation or a tool error all come back as an ``error`` result the
    model sees.
    """
    started = now()
    tool = registry.get(call.name)
    if call.arguments_error is not None:
        return not_run(
            call,
            job,
            status=ToolStatus.ERROR,
            code="invalid_arguments",
            at=started,
            content=f"{call.name} was not run: {call.arguments_error}. "
            "Send the call again with a valid JSON object as arguments.",
        )
    if tool is None:
        return not_run(
            call,
            job,
            status=ToolStatus.ERROR,
            code="unknown_tool",
            at=started,
            content=f"unknown tool {call.name!r}; available: {', '.join(registry.names())}",
        )
    key = idempotency_key(job.run_id, call.call_id)
    ctx = ToolContext(
        workspace=job.workspace,
        run_id=job.run_id,
        call_id=call.call_id,
        idempotency_key=key,
        max_output_bytes=job.max_output_bytes,
        cancel=job.cancel,
        # who runs the command (scripts name their work by it; never a secret)
        env={"NAHIDA_SESSION_ID": job.session_id, "NAHIDA_RUN_ID": job.run_id}
        if job.session_id
        else {},
    )
    outcome = run_tool(tool, call.arguments, ctx)
    kind = tool.spec.evidence_kind
    receipt = _receipt(call, job, outcome, kind, key, started=started, finished=now())
    # The model never sees a credential a tool printed (worker_secrets.redact).
    content = redact(outcome.content)
    result = CallResult(call.call_id, call.name, outcome.status, content, kind.value)
    return Execution(result, receipt)


def _receipt(
    call: ToolCall,
    job: CallJob,
    outcome: Any,
    kind: Any,
    key: str,
    *,
    started: datetime,
    finished: datetime,
) -> ExecutionReceipt:
    """The receipt of a call that ran; one that cannot hold its evidence still gets one."""
    fields: dict[str, Any] = {
        "run_id": job.run_id,
        "call_id": call.call_id,
        "tool_name": call.name,
        "status": outcome.status,
        "started_at": started,
        "finished_at": finished,
        "evidence_kind": kind,
        "verification_status": verification_for(call.name, outcome.status, kind, outcome.evidence),
        "idempotency_key": key,
        "epoch": job.epoch,
    }
    try:
        receipt = ExecutionReceipt(
            **fields, input_fingerprint=call.fingerprint, evidence=dict(outcome.evidence)
        )
    except Exception as exc:  # the tool ran: its side effect still gets a receipt
        log.exception("call %s: the receipt could not be built as given", call.call_id)
        receipt = ExecutionReceipt(
            **fields,
            input_fingerprint=input_fingerprint(repr(call.arguments)),
            evidence={"error_code": "evidence_unrecordable", "detail": type(exc).__name__},
        )
    return receipt


def execution_to_json(execution: Execution) -> dict[str, Any]:
    """A JSON-safe mapping of an execution (the remote tool task's return value)."""
    r = execution.result
    return {
        "result": {
            "call_id": r.call_id,
            "name": r.name,
            "status": r.status.value,
            "content": r.content,
            "evidence_kind": r.evidence_kind,
        },
        "receipt": execution.receipt.model_dump(mode="json"),
    }


def execution_from_json(data: dict[str, Any]) -> Execution:
    """Inverse of :func:`execution_to_json`.

    Raises:
        pydantic.ValidationError / KeyError: the mapping is not an execution.
    """
    r = data["result"]
    result = CallResult(
        r["call_id"], r["name"], ToolStatus(r["status"]), r["content"], r["evidence_kind"]
    )
    return Execution(result, ExecutionReceipt.model_validate(data["receipt"]))
