"""The reserved verifier on the runtime side: its id, rows, prompt and view (DESIGN.md section 6).

A verifier is a child session the runtime starts itself for a candidate
answer (``core/verifier_steps.py`` decides when).  Its id is derived from
the parent's run and the sequence of the ``verifier_started`` event
(:func:`verifier_id`), so a parent killed anywhere around the start never
starts a second one; its rows are written in the transaction that commits
that event (``CommitPoints.start_verifier``).  It runs the reserved profile
(read-only tools, the verdict as its required structured output) on the
diff of the workspace against the session's base; the parent parks on it
like on a foreground Task child, and :func:`verifier_view` reads what its
sealed run answered.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from nahida_workers.core.events import EventType, SessionStatus, TerminalState, ToolStatus
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.policy import STRUCTURED_OUTPUT_TOOL, schema_digest
from nahida_workers.core.policy.goals import goal_view
from nahida_workers.core.policy.verification import (
    VERDICT_SCHEMA,
    VERIFIER_AGENT,
    VerifierView,
    starts,
    workspace_base,
)
from nahida_workers.core.records import OutboxRecord, RunRecord, SessionRecord
from nahida_workers.core.state import RunState
from nahida_workers.core.verifier_steps import StartVerification, verifier_prompt
from nahida_workers.ports import LedgerReader
from nahida_workers.runtime.children.spawn import Spawner
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.workspaces.diff import workspace_diff

__all__ = ["VERIFIER_NAMESPACE", "verifier_id", "verifier_rows", "verifier_view"]

#: The uuid5 namespace of verifier session ids (fixed: ids must be stable forever).
VERIFIER_NAMESPACE = uuid.UUID("3e0f6a8c-1d2b-5c47-9e31-7a5b2c9d4f60")
_DIGEST = schema_digest(VERDICT_SCHEMA)

Rows = tuple[SessionRecord, ChildLink, RunRecord, Any, OutboxRecord]


def verifier_id(parent_run_id: str, sequence: int) -> str:
    """The verifier started at event ``sequence`` of ``parent_run_id``: uuid5, hex."""
    return uuid.uuid5(VERIFIER_NAMESPACE, f"{parent_run_id}:{sequence}").hex


def _task(state: RunState, spec: SessionSpec) -> str:
    """What the user asked this run: its first user input (the job's prompt otherwise)."""
    for event in state.events:
        if event.type is EventType.USER_INPUT:
            return str(event.payload.get("text") or spec.prompt)
    return spec.prompt


def verifier_rows(
    spawner: Spawner,
    state: RunState,
    start: StartVerification,
    *,
    workspace: str,
    now: datetime,
) -> tuple[str, Rows]:
    """The verifier child's id and rows for ``start`` (its event comes next in ``state``).

    The prompt carries the task, the candidate answer, the goal and the
    diff of ``workspace`` against the session's recorded base (``git diff``,
    untracked files included); the verifier number picks its provider
    (``verification.next_providers``).
    """
    spec = spawner.spec
    sequence = state.next_sequence
    child = verifier_id(state.run_id, sequence)
    candidate = next((e for e in state.events if e.sequence == start.candidate_seq), None)
    answer = str(candidate.payload.get("text", "")) if candidate is not None else ""
    goal = goal_view((*state.history, *state.events), spec.goal)
    _, base = workspace_base(state)
    prompt = verifier_prompt(
        state,
        start,
        task=_task(state, spec),
        answer=answer,
        diff=workspace_diff(Path(workspace), base),
        objective=goal.objective if goal is not None else None,
        summary=goal.summary if goal is not None else "",
    )
    attempt = len(starts(state)) + 1
    lineage: dict[str, Any] = {
        "parent_run_id": state.run_id,
        "agent": VERIFIER_AGENT,
        "description": f"verify ({start.purpose.value})",
        "mode": "foreground",
        "isolation": "shared",
        "verifier": {"purpose": start.purpose.value, "sequence": sequence, "attempt": attempt},
    }
    rows = spawner.child_rows(child, spec.verifier_spec(prompt, attempt), lineage, now)
    return child, rows


def verifier_view(ledger: LedgerReader, child: str) -> VerifierView:
    """What became of verifier ``child``: still running, refused, or its sealed answer.

    The answer is the object of the last successful StructuredOutput call
    of the verdict schema in its last sealed run; its terminal state says
    whether the verifier's own completion pipeline accepted it.
    """
    session = ledger.get_session(child)
    if session is None:  # its rows are written with the started event: a limit refused it
        return VerifierView(child, refused="a child-session limit refused the verifier")
    if session.status is not SessionStatus.DONE:
        return VerifierView(child)
    run = next((r for r in reversed(ledger.runs_of(child)) if r.terminal_state is not None), None)
    if run is None:
        return VerifierView(child, state=TerminalState.FAILED, reason="no_run_sealed")
    found = None
    for receipt in ledger.receipts(run.run_id):
        if (
            receipt.tool_name == STRUCTURED_OUTPUT_TOOL
            and receipt.status is ToolStatus.OK
            and receipt.evidence.get("valid") is True
            and receipt.evidence.get("schema_sha256") == _DIGEST
        ):
            found = receipt.evidence.get("object")
    reason = run.terminal_reason.value if run.terminal_reason else None
    verdict = found if isinstance(found, dict) else None
    return VerifierView(child, state=run.terminal_state, reason=reason, verdict=verdict)
