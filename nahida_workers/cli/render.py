"""Rich tables and transcripts for the CLI."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nahida_workers.cli.ids import shortener
from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.core.records import RunRecord

if TYPE_CHECKING:
    from nahida_workers.ports import LedgerReader

__all__ = [
    "batch_table",
    "batches_rows",
    "batches_table",
    "print_run",
    "runs_table",
    "summary_sentence",
]

_STYLE = {
    "completed": "green",
    "unverified": "yellow",
    "incomplete": "yellow",
    "failed": "red",
    "cancelled": "magenta",
}


def _state(state: str) -> str:
    return f"[{_STYLE.get(state, 'white')}]{escape(state)}[/]"


def batch_table(report: dict[str, Any], *, width: int | None = None) -> Table:
    """One row per session, with its latest run's facts.

    Columns: session id, repo, its latest run's state, reason, tool calls,
    seconds running, turns, runs, seconds queued, the latest run id.

    Ids are unique prefixes (every command takes them back); ids and states
    never wrap or shrink.  In a terminal narrower than 120 columns (``width``)
    the less important numbers are left out (``--json`` has them all) and the
    repo and reason columns fold.
    """
    rows = report["sessions"]
    short = shortener([r["session_id"] for r in rows] + [r["run_id"] for r in rows if r["run_id"]])

    def seconds(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    def reason(row: dict[str, Any]) -> str:
        text = row["reason"] or "-"
        if row.get("failure_code") and row["failure_code"] != row["reason"]:
            text += f" ({row['failure_code']})"
        if row.get("unsandboxed_calls"):
            text += " [unsandboxed]"
        return escape(text)

    # (header, cell, column options, narrowest terminal that shows it)
    columns: list[tuple[str, Any, dict[str, Any], int]] = [
        ("session", lambda r: short[r["session_id"]], {"no_wrap": True, "min_width": 8}, 0),
        ("repo", lambda r: escape(r["workspace"].rsplit("/", 1)[-1]), {"min_width": 10}, 0),
        ("state", lambda r: _state(r["terminal_state"] or r["status"]), _ID, 0),
        ("reason", reason, {"min_width": 10}, 0),
        ("tools", lambda r: str(r["tool_calls"]), _NUM, 90),
        ("run s", lambda r: seconds(r["seconds"]), _NUM, 100),
        ("turns", lambda r: str(r["turns"]), _NUM, 110),
        ("runs", lambda r: str(r["runs"]), _NUM, 110),
        ("queued s", lambda r: seconds(r["queued_seconds"]), _NUM, 120),
        ("latest run", lambda r: short[r["run_id"]] if r["run_id"] else "-", _ID, 0),
        ("tokens in", lambda r: _tokens(r, "input_tokens"), _NUM, 140),
        ("out", lambda r: _tokens(r, "output_tokens"), _NUM, 140),
    ]
    if report.get("usage", {}).get("cost_usd") is not None:  # a price table: a cost column
        columns.append(("cost $", lambda r: f"{r['usage']['cost_usd']:.4f}", _NUM, 140))
    shown = [c for c in columns if width is None or width >= c[3]]
    title = f"batch {report['batch_id']} ({report.get('job')})"
    if report.get("schedule"):
        title += f", schedule {report['schedule']['name']} fire {report['schedule']['fire_time']}"
    table = Table(title=escape(title))
    for header, _cell, options, _min in shown:
        table.add_column(header, overflow="fold", **options)
    for row in rows:
        table.add_row(*(cell(row) for _header, cell, _options, _min in shown))
    return table


def _tokens(row: dict[str, Any], key: str) -> str:
    usage = row.get("usage")
    return f"{usage[key]:,}" if usage else "-"


_ID: dict[str, Any] = {"no_wrap": True, "min_width": 10}
_NUM: dict[str, Any] = {"no_wrap": True, "justify": "right"}


def runs_table(session_id: str, runs: Sequence[RunRecord]) -> Table:
    """Every run of one session, oldest first: id, state, reason, start, duration.

    No cell ever wraps: the widest row (a short id, ``unverified``, a reason
    such as ``provider_protocol_invalid``, the start as month-day and time,
    a duration) fits an 80-column terminal; ``--json`` has the full ids and
    timestamps.
    """
    short = shortener(r.run_id for r in runs)
    table = Table(title=f"session {session_id}: {len(runs)} run(s)")
    table.add_column("run", no_wrap=True, min_width=8)
    table.add_column("state", no_wrap=True, min_width=10)
    table.add_column("reason", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("took", no_wrap=True, justify="right")
    for run in runs:
        state = run.terminal_state.value if run.terminal_state else "open"
        took = (run.ended_at - run.started_at).total_seconds() if run.ended_at else None
        table.add_row(
            short[run.run_id],
            _state(state),
            run.terminal_reason.value if run.terminal_reason else "-",
            run.started_at.strftime("%m-%d %H:%M:%S"),
            f"{took:.1f}s" if took is not None else "-",
        )
    return table


def batches_rows(ledger: LedgerReader) -> list[dict[str, Any]]:
    """Every batch with its session counts by status (what ``status`` lists)."""
    rows = []
    for batch in ledger.batches():
        sessions = [s for s in ledger.sessions(batch_id=batch.batch_id) if s.parent_id is None]
        rows.append(
            {
                "batch_id": batch.batch_id,
                "job": batch.job_name,
                "created_at": batch.created_at.isoformat(),
                "sessions": len(sessions),
                "done": sum(1 for s in sessions if s.status.value == "done"),
            }
        )
    return rows


def batches_table(rows: Sequence[dict[str, Any]]) -> Table:
    """The batches of :func:`batches_rows` as a table (short ids)."""
    short = shortener(r["batch_id"] for r in rows)
    table = Table(title="batches")
    table.add_column("batch", no_wrap=True, min_width=8)
    table.add_column("job", overflow="fold")
    table.add_column("created", no_wrap=True)
    table.add_column("sessions", justify="right", no_wrap=True)
    table.add_column("done", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            short[row["batch_id"]],
            escape(row["job"]),
            row["created_at"][:19],
            str(row["sessions"]),
            str(row["done"]),
        )
    return table


def jobs_usage_table(report: dict[str, Any], *, since_text: str) -> Table:
    """What the fleet spent per job (:func:`nahida_workers.spend.jobs_usage`): a row each, a total.

    A cost column only with a price table; ``?`` where a job has a turn of
    a model the table does not price.
    """
    table = Table(title=escape(f"spent per job, runs started in the last {since_text}"))
    headers = ["job", "sessions", "runs", "turns", "tokens in", "cached", "out"]
    priced = report["priced"]
    if priced:
        headers.append("cost $")
    for header in headers:
        table.add_column(header, overflow="fold", **({} if header == "job" else _NUM))

    def cells(name: str, row: dict[str, Any]) -> list[str]:
        shown = [
            escape(name),
            str(row.get("sessions", "")),
            str(row.get("runs", "")),
            f"{row['turns']:,}",
            f"{row['input_tokens']:,}",
            f"{row['cached_tokens']:,}",
            f"{row['output_tokens']:,}",
        ]
        if priced:
            shown.append("?" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}")
        return shown

    for row in report["jobs"]:
        table.add_row(*cells(row["job"], row))
    total = report["total"]
    sessions = sum(r["sessions"] for r in report["jobs"])
    runs = sum(r["runs"] for r in report["jobs"])
    table.add_row(*cells("total", {**total, "sessions": sessions, "runs": runs}), style="bold")
    return table


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", "\\n")
    text = text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
    return escape(text)


def print_run(
    console: Console,
    run: RunRecord,
    events: Sequence[Event],
    receipts: Sequence[ExecutionReceipt],
    children: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """The ordered transcript of a run: every event, tool calls with their receipts.

    ``children``: call id -> the child session of that Task call
    (``cli/tree.py: call_children``), printed under the call with its state;
    the child id is shown as a prefix unique among the children shown.
    """
    by_call = {r.call_id: r for r in receipts}
    children = children or {}
    short_child = shortener(c["session_id"] for c in children.values())
    state = run.terminal_state.value if run.terminal_state else "open"
    console.print(
        f"[bold]run {run.run_id}[/] session {run.session_id} "
        f"provider {escape(run.provider)}/{escape(run.model)} "
        f"state {_state(state)} reason {run.terminal_reason or '-'} trace {run.trace_id}"
    )
    for e in events:
        head = f"#{e.sequence:<3} [cyan]{e.type.value:<16}[/] epoch {e.epoch}"
        p = e.payload
        if e.type is EventType.USER_INPUT:
            console.print(f"{head} ({_short(p.get('source'))}) {_short(p.get('text'))}")
        elif e.type is EventType.ASSISTANT_OUTPUT:
            console.print(
                f"{head} turn {p.get('turn')} stop {_short(p.get('stop_reason'))}: "
                f"{_short(p.get('text'))}"
            )
        elif e.type is EventType.TOOL_CALL:
            child = children.get(e.call_id or "")
            _print_call(console, head, e, by_call.get(e.call_id or ""), child, short_child)
        elif e.type is EventType.TOOL_RESULT:
            flag = " synthetic" if p.get("synthetic") else ""
            console.print(
                f"{head} {_short(e.call_id)} {_short(p.get('status'))}{flag}: "
                f"{_short(p.get('content'))}"
            )
        elif e.type is EventType.TERMINAL:
            console.print(
                f"{head} [bold]{_short(p.get('state'))}[/] {_short(p.get('reason'))}: "
                f"{_short(p.get('final_text'))}"
            )
        else:
            console.print(f"{head} {_short(p)}")


def _print_call(
    console: Console,
    head: str,
    e: Event,
    receipt: ExecutionReceipt | None,
    child: Mapping[str, Any] | None,
    short_child: Mapping[str, str],
) -> None:
    """A tool_call line, its receipt, and (a Task call) its child session with its state."""
    p = e.payload
    console.print(
        f"{head} {_short(e.call_id)} {_short(p.get('name'))}({_short(p.get('arguments'), 200)})"
    )
    if receipt is not None:
        ms = (receipt.finished_at - receipt.started_at).total_seconds() * 1000
        console.print(
            f"       receipt {receipt.status.value} {receipt.evidence_kind.value} "
            f"{ms:.1f} ms fp {receipt.input_fingerprint[:12]} "
            f"evidence {_short(receipt.evidence, 400)}"
        )
    else:
        console.print("       receipt: none")
    if child is not None:
        console.print(
            f"       child {short_child[child['session_id']]} {_state(child['state'])}"
            + (f" {escape(child['reason'])}" if child.get("reason") else "")
            + (f" agent {_short(child['agent'])}" if child.get("agent") else "")
        )


def summary_sentence(report: dict[str, Any]) -> str:
    """``N sessions: 22 completed, 2 failed.`` -- the batch's summary as a sentence."""
    total = len(report["sessions"])
    counts = report["summary"]
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda i: -i[1]))
    noun = "session" if total == 1 else "sessions"
    sentence = f"batch {report['batch_id']}: {total} {noun}" + (f": {parts}." if parts else ".")
    if report.get("usage"):
        from nahida_workers.spend import usage_line

        sentence += f" {usage_line(report['usage']).capitalize()}."
    unsandboxed = report.get("unsandboxed_sessions") or 0
    if unsandboxed:
        sentence += (
            f" {unsandboxed} of them ran commands unsandboxed (NAHIDA_SANDBOX=none on a worker)."
        )
    return sentence
