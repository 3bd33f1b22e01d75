"""Receipts every call gets, and what makes one verified (DESIGN.md section 6).

* Every committed ``tool_call`` ends with a receipt (DESIGN.md section 2),
  also when it never finished: a result that recovery closed as
  ``interrupted``, or that was ``aborted``, ``timed_out`` or refused by a
  bound, is committed with a synthetic receipt of that status
  (:func:`missing_receipts`), so ``runs show`` and the batch report never
  show a call without one.
* A successful receipt is ``verified`` when the tool checked its evidence
  itself (:func:`verification_for`): a file's sha256 computed from the bytes
  it read back (Read, ReadPromptArtifact), or exit code 0 of a check command
  (test, lint, type check, build) that Bash ran.  Anything else successful
  stays ``unverified``; a failed or synthetic receipt is ``not_applicable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nahida_workers.core.events import (
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ToolStatus,
    VerificationStatus,
)
from nahida_workers.core.policy.detectors import classify_command
from nahida_workers.core.state import RunState

__all__ = ["idempotency_key", "missing_receipts", "verification_for"]


def idempotency_key(run_id: str, call_id: str) -> str:
    """``{run_id}:{call_id}``: stable across retries and owners (case B13)."""
    return f"{run_id}:{call_id}"


def verification_for(
    tool_name: str, status: ToolStatus, kind: EvidenceKind, evidence: Mapping[str, Any]
) -> VerificationStatus:
    """Whether a receipt's evidence was checked by the tool that made it (module doc)."""
    if status is not ToolStatus.OK:
        return VerificationStatus.NOT_APPLICABLE
    if kind is EvidenceKind.OBSERVE and isinstance(evidence.get("sha256"), str):
        return VerificationStatus.VERIFIED
    if (
        tool_name == "Bash"
        and evidence.get("exit_code") == 0
        and classify_command(str(evidence.get("command", "")))
    ):
        return VerificationStatus.VERIFIED
    return VerificationStatus.UNVERIFIED


def missing_receipts(
    state: RunState,
    events: Sequence[Event],
    receipts: Sequence[ExecutionReceipt],
    *,
    now: datetime,
) -> list[ExecutionReceipt]:
    """Synthetic receipts for the ``tool_result`` events of ``events`` that have none.

    A call already holding a receipt (committed, or in ``receipts``) is left
    alone: a result rebuilt from its receipt keeps the original.

    Returns:
        One receipt per such result, with the result's status, evidence
        ``{"error_code": <status or reason>, "synthetic": True}`` and
        verification ``not_applicable``.
    """
    committed = state.receipts
    have = {r.call_id for r in receipts}
    out: list[ExecutionReceipt] = []
    for event in events:
        if event.type is not EventType.TOOL_RESULT or event.call_id is None:
            continue
        if event.call_id in have or event.call_id in committed:
            continue
        call = state.calls.get(event.call_id)
        if call is None:
            continue  # the ledger refuses a result without its call anyway
        status = ToolStatus(str(event.payload.get("status", ToolStatus.ERROR.value)))
        out.append(
            ExecutionReceipt(
                run_id=state.run_id,
                call_id=event.call_id,
                tool_name=call.name,
                status=status,
                started_at=now,
                finished_at=now,
                input_fingerprint=call.fingerprint,
                evidence={
                    "error_code": str(event.payload.get("reason") or status.value),
                    "synthetic": True,
                },
                evidence_kind=EvidenceKind.NONE,
                verification_status=VerificationStatus.NOT_APPLICABLE,
                idempotency_key=idempotency_key(state.run_id, event.call_id),
            )
        )
        have.add(event.call_id)
    return out
