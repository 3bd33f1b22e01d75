"""``nahida eval``: run the evaluation set and print expected vs actual terminal states.

Exit codes: 0 every session ended as expected; 1 some did not; 2 the set file
is missing or invalid (a :class:`~nahida_workers.errors.ConfigError`, turned
into a message by ``cli.main``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from nahida_workers.testing.evaluation import EvalReport, EvalRow

__all__ = ["eval_command", "eval_table"]


def eval_table(report: EvalReport) -> Table:
    """One row per session: expected vs actual state/reason, provider calls, verifiers, result."""
    table = Table(title="evaluation set")
    columns = ("name", "category", "expected", "actual", "provider calls", "verifiers", "result")
    for column in columns:
        table.add_column(column, justify="right" if column in columns[4:6] else "left")
    for row in report.rows:
        expect = row.case.expect
        calls = str(row.calls) if row.calls_ok else f"{row.calls} (expected {expect.calls})"
        verifiers = str(row.verifiers)
        if not row.verifiers_ok:
            verifiers += f" (expected {row.case.verifiers})"
        table.add_row(
            row.case.name,
            row.case.category,
            f"{expect.state.value}/{expect.reason.value}",
            f"{row.state}/{row.reason}",
            calls,
            verifiers,
            _result(row),
        )
    return table


def _result(row: EvalRow) -> str:
    if row.skipped:
        return f"skipped: {', '.join(row.skipped)} not installed"
    return "ok" if row.ok else "[red]MISMATCH[/red]"


def eval_command(
    set_path: Annotated[
        Path | None,
        typer.Option(
            "--set",
            help="Evaluation set file (YAML); default: the repository's tests/eval/sessions.yaml.",
        ),
    ] = None,
) -> None:
    """Run the evaluation set in-process and compare terminal states with expectations.

    Prints one row per session and a summary line with the completed-without-receipt
    rate and the share of pure questions completed in one provider call.  Exits 0 iff
    every session that ran ended as expected; a session whose script needs a tool
    this install lacks (pytest, ruff: ``pip install -e '.[dev]'``) is skipped and
    the summary names the tool.
    """
    from nahida_workers.testing.evaluation import DEFAULT_SET, load_eval_set, run_eval_set

    cases = load_eval_set(set_path or DEFAULT_SET)
    report = run_eval_set(cases)
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(eval_table(report))
    console.print(report.summary(), highlight=False, markup=False)
    raise typer.Exit(0 if report.ok else 1)
