"""Rich tables and transcripts for the CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.core.records import RunRecord

if TYPE_CHECKING:
    from nahida_workers.ports import Ledger

__all__ = ["batch_table", "batches_table", "print_run", "runs_table"]

_STYLE = {
    "completed": "green",
    "unverified": "yellow",
    "incomplete": "yellow",
    "failed": "red",
    "cancelled": "magenta",
}


def batch_table(report: dict[str, Any]) -> Table:
    """One row per session: repo, its latest run's state, reason, turns, tool calls,
    seconds running and queued, the number of runs, the latest run id, the session id."""
    title = f"batch {report['batch_id']} ({report.get('job')})"
    if report.get("schedule"):
        title += f", schedule {report['schedule']['name']} fire {report['schedule']['fire_time']}"
    table = Table(title=title)
    table.add_column("repo", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("reason", no_wrap=True)
    for column in ("turns", "tool calls", "run s", "queued s"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("run id (latest)", overflow="fold")
    table.add_column("session id", overflow="fold")
    for row in report["sessions"]:
        state = row["terminal_state"] or row["status"]
        seconds = f"{row['seconds']:.2f}" if row["seconds"] is not None else "-"
        queued = f"{row['queued_seconds']:.2f}" if row["queued_seconds"] is not None else "-"
        reason = row["reason"] or "-"
        if row.get("failure_code") and row["failure_code"] != row["reason"]:
            reason += f" ({row['failure_code']})"
        table.add_row(
            row["workspace"].rsplit("/", 1)[-1],
            f"[{_STYLE.get(state, 'white')}]{state}[/]",
            reason,
            str(row["turns"]),
            str(row["tool_calls"]),
            seconds,
            queued,
            str(row["runs"]),
            row["run_id"] or "-",
            row["session_id"],
        )
    return table


def runs_table(session_id: str, runs: Sequence[RunRecord]) -> Table:
    """Every run of one session, oldest first: id, state, reason, start, end."""
    table = Table(title=f"session {session_id}: {len(runs)} run(s)")
    for column in ("run id", "state", "reason", "started", "ended"):
        table.add_column(column, overflow="fold")
    for run in runs:
        state = run.terminal_state.value if run.terminal_state else "open"
        table.add_row(
            run.run_id,
            f"[{_STYLE.get(state, 'white')}]{state}[/]",
            run.terminal_reason.value if run.terminal_reason else "-",
            run.started_at.isoformat(timespec="seconds"),
            run.ended_at.isoformat(timespec="seconds") if run.ended_at else "-",
        )
    return table


def batches_table(ledger: Ledger[Any]) -> Table:
    """Every batch with its session counts by status."""
    table = Table(title="batches")
    for column in ("batch", "job", "created", "sessions", "done"):
        table.add_column(column)
    for batch in ledger.batches():
        sessions = ledger.sessions(batch_id=batch.batch_id)
        done = sum(1 for s in sessions if s.status.value == "done")
        table.add_row(
            batch.batch_id,
            batch.job_name,
            batch.created_at.isoformat(timespec="seconds"),
            str(len(sessions)),
            str(done),
        )
    return table


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def print_run(
    console: Console,
    run: RunRecord,
    events: Sequence[Event],
    receipts: Sequence[ExecutionReceipt],
) -> None:
    """The ordered transcript of a run: every event, tool calls with their receipts."""
    by_call = {r.call_id: r for r in receipts}
    state = run.terminal_state.value if run.terminal_state else "open"
    console.print(
        f"[bold]run {run.run_id}[/] session {run.session_id} provider {run.provider}/{run.model} "
        f"state [{_STYLE.get(state, 'white')}]{state}[/] reason {run.terminal_reason or '-'} "
        f"trace {run.trace_id}"
    )
    for e in events:
        head = f"#{e.sequence:<3} [cyan]{e.type.value:<16}[/] epoch {e.epoch}"
        p = e.payload
        if e.type is EventType.USER_INPUT:
            console.print(f"{head} ({p.get('source')}) {_short(p.get('text'))}")
        elif e.type is EventType.ASSISTANT_OUTPUT:
            console.print(
                f"{head} turn {p.get('turn')} stop {p.get('stop_reason')}: {_short(p.get('text'))}"
            )
        elif e.type is EventType.TOOL_CALL:
            console.print(f"{head} {e.call_id} {p.get('name')}({_short(p.get('arguments'), 200)})")
            receipt = by_call.get(e.call_id or "")
            if receipt is not None:
                ms = (receipt.finished_at - receipt.started_at).total_seconds() * 1000
                console.print(
                    f"       receipt {receipt.status.value} {receipt.evidence_kind.value} "
                    f"{ms:.1f} ms fp {receipt.input_fingerprint[:12]} "
                    f"evidence {_short(receipt.evidence, 400)}"
                )
            else:
                console.print("       receipt: none")
        elif e.type is EventType.TOOL_RESULT:
            flag = " synthetic" if p.get("synthetic") else ""
            console.print(f"{head} {e.call_id} {p.get('status')}{flag}: {_short(p.get('content'))}")
        elif e.type is EventType.TERMINAL:
            console.print(
                f"{head} [bold]{p.get('state')}[/] {p.get('reason')}: {_short(p.get('final_text'))}"
            )
        else:
            console.print(f"{head} {_short(p)}")
