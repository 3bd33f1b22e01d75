"""Batch reports built from the ledger: one row per session, receipts included.

The JSON report carries what the receipts recorded (evidence per call), so a
survey's numbers come from the ledger, never from the model's prose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.records import SessionRecord

if TYPE_CHECKING:
    from nahida_workers.core.usage import PriceTable
    from nahida_workers.ports import LedgerReader

__all__ = ["batch_report", "session_row"]


def session_row(ledger: LedgerReader, session: SessionRecord) -> dict[str, Any]:
    """Everything the batch table and the JSON report show for one session."""
    runs = ledger.runs_of(session.session_id)
    run = runs[-1] if runs else None
    row: dict[str, Any] = {
        "session_id": session.session_id,
        "workspace": session.workspace,
        "status": session.status.value,
        "run_id": run.run_id if run else None,
        "runs": len(runs),
        "terminal_state": None,
        "reason": None,
        "failure_code": None,
        "turns": 0,
        "tool_calls": 0,
        "seconds": None,
        "queued_seconds": None,
        "final_text": None,
        "unsandboxed_calls": 0,
        "calls": [],
    }
    if run is None:
        return row
    events = ledger.events(run.run_id)
    receipts = {r.call_id: r for r in ledger.receipts(run.run_id)}
    results = {e.call_id: e.payload for e in events if e.type is EventType.TOOL_RESULT}
    calls = []
    for event in events:
        if event.type is not EventType.TOOL_CALL:
            continue
        receipt = receipts.get(event.call_id or "")
        result: Mapping[str, Any] = results.get(event.call_id, {})
        calls.append(
            {
                "call_id": event.call_id,
                "tool": event.payload.get("name"),
                "arguments": event.payload.get("arguments"),
                "status": result.get("status", "missing"),
                "evidence": receipt.evidence if receipt else None,
            }
        )
    terminal = next((e.payload for e in events if e.type is EventType.TERMINAL), None)
    row.update(
        terminal_state=run.terminal_state.value if run.terminal_state else None,
        reason=run.terminal_reason.value if run.terminal_reason else None,
        failure_code=run.failure_code.value if run.failure_code else None,
        turns=sum(1 for e in events if e.type is EventType.ASSISTANT_OUTPUT),
        tool_calls=len(calls),
        seconds=_run_seconds(events, run.ended_at),
        queued_seconds=_queued_seconds(events, run.started_at),
        final_text=terminal.get("final_text") if terminal else None,
        # commands that ran without a sandbox (NAHIDA_SANDBOX=none; tools/sandbox.py)
        unsandboxed_calls=sum(1 for c in calls if (c["evidence"] or {}).get("sandbox") == "none"),
        calls=calls,
    )
    return row


def _first_owned(events: list[Event]) -> datetime | None:
    """When a lease owner first wrote (epoch >= 1): the run started running."""
    return next((e.created_at for e in events if e.epoch >= 1 and e.created_at), None)


def _run_seconds(events: list[Event], ended_at: datetime | None) -> float | None:
    first = _first_owned(events)
    if first is None or ended_at is None:
        return None
    return max(0.0, (ended_at - first).total_seconds())


def _queued_seconds(events: list[Event], started_at: datetime) -> float | None:
    first = _first_owned(events)
    return None if first is None else max(0.0, (first - started_at).total_seconds())


def batch_report(
    ledger: LedgerReader,
    batch_id: str,
    *,
    started_at: datetime | None = None,
    prices: PriceTable | None = None,
) -> dict[str, Any]:
    """The JSON report of a batch: its top-level sessions in dispatch order plus a summary.

    Child sessions (Task calls, DESIGN.md section 8) share their parent's
    batch id; they are not rows of their own: each row's ``children`` lists
    its direct children's ids (``nahida tree SESSION_ID`` shows the tree).

    ``usage`` (each row's: its session and the child sessions under it; the
    report's: every session of the batch) is the tokens the providers
    reported, with a cost when ``prices`` is given (:mod:`nahida_workers.spend`).
    """
    from nahida_workers.core.usage import UsageTally
    from nahida_workers.spend import sessions_usage

    batch = ledger.get_batch(batch_id)
    every = ledger.sessions(batch_id=batch_id)
    kids: dict[str, list[str]] = {}
    for s in every:
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s.session_id)
    spent = sessions_usage(ledger, [s.session_id for s in every], prices)

    def subtree(session_id: str) -> UsageTally:
        own = spent.get(session_id) or UsageTally(prices)
        return own.merge(subtree(kid) for kid in kids.get(session_id, []))

    rows = []
    for s in every:
        if s.parent_id is None:
            rows.append(
                {
                    **session_row(ledger, s),
                    "children": kids.get(s.session_id, []),
                    "usage": subtree(s.session_id).as_json(),
                }
            )
    counts = Counter(r["terminal_state"] or r["status"] for r in rows)
    return {
        "batch_id": batch_id,
        "job": batch.job_name if batch else None,
        # a schedule's fire (DESIGN.md section 8): name, schedule id, fire time, kind
        "schedule": batch.spec.get("schedule") if batch else None,
        "created_at": batch.created_at.isoformat() if batch else None,
        "started_at": started_at.isoformat() if started_at else None,
        "summary": dict(sorted(counts.items())),
        "all_completed": bool(rows) and all(r["terminal_state"] == "completed" for r in rows),
        "unsandboxed_sessions": sum(1 for r in rows if r["unsandboxed_calls"]),
        "usage": UsageTally(prices).merge(spent.values()).as_json(),
        "sessions": rows,
    }
