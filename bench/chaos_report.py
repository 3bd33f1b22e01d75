"""The end of a chaos run: the checks over the quiet ledger, the summary table, the verdict.

Part of :mod:`bench.chaos` (its module docstring lists the checks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.chaos_checks import (
    Findings,
    LedgerDump,
    check_deliveries,
    check_epochs,
    check_steering,
    check_terminals,
    check_transcripts,
    count_calls_without_receipt,
    log_counts,
    read_deliveries,
)
from bench.chaos_children import check_children
from bench.chaos_control import mixed_figures
from bench.chaos_hostile import check_hostile_budget, check_no_collateral_timeouts
from bench.chaos_mixed import Mixed
from bench.chaos_rig import Plan, Tally, console, retry
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import Worker

__all__ = ["report", "summary"]


def summary(plan: Plan, tally: Tally, found: Findings, extra: dict[str, Any]) -> Table:
    """The compact table: each check's verdict, then the counts."""
    table = Table(title=f"chaos run: {plan.sessions} sessions, {plan.workers} session workers")
    table.add_column("item")
    table.add_column("value", overflow="fold")
    for name, bad in found.violations.items():
        verdict = "PASS" if not bad else f"FAIL ({len(bad)}): " + "; ".join(bad[:3])
        table.add_row(f"check {name}", verdict)
    for kind in plan.kinds:
        table.add_row(f"chaos: {kind}", str(tally.kills[kind]))
    table.add_row("steering messages sent", str(len(tally.steering_sent)))
    table.add_row("steering duplicates sent (same id)", str(tally.steering_duplicates))
    for key, value in {**found.counts, **extra}.items():
        table.add_row(key, str(value))
    return table


def report(
    plan: Plan, ledger: SqlLedger, tally: Tally, deliveries: Path, workers: list[Worker],
    *, drained: bool, mixed: Mixed | None = None,
) -> int:  # fmt: skip
    """Run the checks on the quiet ledger, print the summary; the exit code."""
    dump = retry(lambda: LedgerDump.read(ledger), what="read the ledger")
    found = Findings()
    check_terminals(dump, found)
    check_deliveries(dump, read_deliveries(deliveries), found)
    check_steering(dump, tally.steering_sent, found)
    check_epochs(dump, found)
    check_transcripts(dump, found)
    count_calls_without_receipt(dump, found)
    check_hostile_budget(dump, found)
    check_no_collateral_timeouts(dump, found)
    check_children(dump, ledger, found)
    figures = None if mixed is None else mixed_figures(dump, mixed, tally.sigterm_exits, found)
    extra: dict[str, Any] = {
        "pg backends terminated": tally.pg_backends_terminated,
        "sweeps (errors)": f"{tally.sweeps} ({dict(tally.sweep_errors) or 'none'})",
        "sweeper re-dispatches (broker resets)": f"{tally.redispatched} ({tally.broker_resets})",
        "workers that exited by themselves (a failure)": len(tally.unexpected_exits),
        "harness errors": len(tally.harness_errors),
        **log_counts(workers),
    }
    console.print(summary(plan, tally, found, extra))
    console.print("chaos timeline:", markup=False)
    for line in tally.timeline:
        console.print(f"  {line}", markup=False)
    for line in tally.unexpected_exits:
        console.print(f"FAILURE: a worker exited by itself: {line}", markup=False)
    for line in tally.harness_errors:
        console.print(f"HARNESS ERROR: {line}", markup=False)
    failed = {k: v for k, v in found.violations.items() if v}
    for name, bad in failed.items():
        console.print(f"VIOLATION {name}: {len(bad)}", markup=False)
        for line in bad[:20]:
            console.print(f"  {line}", markup=False)
    missing = [k for k in set(plan.events) if tally.kills[k] == 0]
    if missing:
        console.print(f"chaos events that never happened: {missing}", markup=False)
    ok = (
        drained
        and not failed
        and not missing
        and not tally.harness_errors
        and not tally.unexpected_exits  # a worker must survive every fault by itself
    )
    result = {
        "drained": drained,
        "violations": {k: len(v) for k, v in found.violations.items()},
        "kills": {k: tally.kills[k] for k in plan.kinds},
        "steering": [len(tally.steering_sent), tally.steering_duplicates],
        "counts": {k: v for k, v in found.counts.items() if isinstance(v, int)},
        "unexpected_exits": len(tally.unexpected_exits),
        "harness_errors": len(tally.harness_errors),
        **({} if figures is None else {"mixed": figures}),
    }
    console.print(
        f"chaos result: {json.dumps(result, sort_keys=True)}", markup=False, soft_wrap=True
    )
    console.print(f"chaos verdict: {'PASS' if ok else 'FAIL'}", markup=False)
    return 0 if ok else 1
