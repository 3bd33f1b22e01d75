"""Checks 12-15 of a mixed chaos run, and its figures (``bench/chaos_mixed.py``).

DESIGN.md sections 1 and 8, issue 21.  Over the quiet ledger:

12. every cancelled session sealed ``cancelled``: the run the cancel found
    (its first run not ended before the call) ends ``cancelled`` -- unless it
    was terminal already (ended before ``Inbox.cancel`` returned: the cancel
    met its seal, or the call was refused as done);
13. every parent of a cancelled subtree is terminal: a cancelled child's
    parent is ``done`` with every run ended, and so is every descendant of a
    cancelled parent;
14. no fire of the schedule recorded ``missed``, and it fired at least twice
    (beat decided fires while everything else went on);
15. every SIGTERMed session worker exited 0 within the grace period (it
    handed its sessions over; none had to be killed).

Check 2 (``chaos_checks``: DeliverOnce at most once) and check 1 (every
session ``done``: none lost) cover the mixed run as they do any run.

Figures, never asserted: fire decision lag p50/p99 (``decided_at -
due_at``), cancel-to-sealed p50/max (the call to the run's ``ended_at``),
the small batch's queue wait (submission to each session's first committed
turn), SIGTERM to exit per worker, and the handover events in the ledger.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bench.chaos_checks import Findings, LedgerDump
from bench.chaos_diagnose import left_at_cancelled
from bench.chaos_mixed import Cancel, Mixed
from bench.chaos_rig import retry
from nahida_workers.core.events import EventType, SessionStatus, TerminalState
from nahida_workers.schedules.model import FireOutcome, FireRecord
from nahida_workers.testing.backlog import decision_lags_s, percentile

__all__ = [
    "check_cancels",
    "check_fires",
    "check_sigterms",
    "check_subtrees",
    "mixed_figures",
]

#: Fires a mixed run must have decided at least (beat was alive and deciding).
MIN_FIRES = 2


def _ms(samples: Sequence[float], q: float) -> str:
    return f"{percentile(samples, q) * 1000:.0f} ms" if samples else "n/a"


def _found_run(dump: LedgerDump, cancel: Cancel) -> Any | None:
    """The run the cancel found: the session's first run not ended before the call."""
    for run in dump.runs.get(cancel.session_id, []):
        if run.ended_at is None or run.ended_at >= cancel.before:
            return run
    return None


def check_cancels(dump: LedgerDump, cancels: Sequence[Cancel], out: Findings) -> list[float]:
    """Check 12 (module docstring); returns the cancel-to-sealed seconds of each cancel."""
    bad = out.check("12 cancelled sessions sealed cancelled")
    latencies: list[float] = []
    outcome: Counter[str] = Counter()
    for cancel in cancels:
        run = _found_run(dump, cancel)
        if run is None:
            outcome[f"{cancel.kind}: terminal before"] += 1
            continue
        if run.terminal_state is TerminalState.CANCELLED and run.ended_at is not None:
            latencies.append((run.ended_at - cancel.before).total_seconds())
            outcome[f"{cancel.kind}: cancelled"] += 1
        elif run.ended_at is not None and run.ended_at <= cancel.after:
            outcome[f"{cancel.kind}: sealed as the cancel came"] += 1
        else:
            state = run.terminal_state.value if run.terminal_state else "not ended"
            bad.append(f"{cancel.kind} {cancel.session_id}: run {run.run_id} {state}")
    out.counts["cancels (kind: outcome)"] = ", ".join(
        f"{k} {v}" for k, v in sorted(outcome.items())
    )
    return latencies


def check_subtrees(dump: LedgerDump, cancels: Sequence[Cancel], out: Findings) -> None:
    """Check 13 (module docstring)."""
    bad = out.check("13 every parent of a cancelled subtree terminal")
    by_id = {s.session_id: s for s in dump.sessions}
    kids: dict[str, list[str]] = defaultdict(list)
    for s in dump.sessions:
        if s.parent_id is not None:
            kids[s.parent_id].append(s.session_id)

    def ended(session_id: str) -> bool:
        s = by_id.get(session_id)
        runs = dump.runs.get(session_id, [])
        return s is not None and s.status is SessionStatus.DONE and all(r.ended_at for r in runs)

    cascaded = Counter[str]()
    for cancel in cancels:
        session = by_id.get(cancel.session_id)
        if session is None:
            bad.append(f"{cancel.session_id}: not in the ledger")
            continue
        if cancel.kind == "child" and session.parent_id and not ended(session.parent_id):
            bad.append(f"parent {session.parent_id} of cancelled {cancel.session_id} not terminal")
        if cancel.kind != "parent":
            continue
        todo = list(kids[cancel.session_id])
        while todo:
            child = todo.pop()
            todo += kids[child]
            if not ended(child):
                bad.append(f"{child} under cancelled parent {cancel.session_id} not terminal")
            last = dump.runs.get(child, [])[-1:]
            state = last[0].terminal_state.value if last and last[0].terminal_state else "open"
            cascaded[state] += 1
    out.counts["descendants of cancelled parents, by last run"] = (
        ", ".join(f"{k} {v}" for k, v in sorted(cascaded.items())) or "none"
    )


def check_fires(fires: Sequence[FireRecord], out: Findings) -> list[float]:
    """Check 14 (module docstring); returns each fire's decision lag, seconds."""
    bad = out.check("14 no fire missed")
    bad += [f"fire {f.fire_time:%H:%M:%S} missed" for f in fires if f.outcome is FireOutcome.MISSED]
    if len(fires) < MIN_FIRES:
        bad.append(f"{len(fires)} fires decided (beat decided fewer than {MIN_FIRES})")
    outcomes = Counter(f.outcome.value for f in fires)
    out.counts["schedule fires by outcome"] = ", ".join(
        f"{k} {v}" for k, v in sorted(outcomes.items())
    )
    return decision_lags_s(fires)


def check_sigterms(
    exits: Sequence[tuple[str, int | None, float]], out: Findings, *, expected: int
) -> None:
    """Check 15 (module docstring): ``expected`` SIGTERMs, each exit recorded and 0."""
    bad = out.check("15 SIGTERMed workers handed over and exited 0")
    if len(exits) != expected:
        bad.append(f"{len(exits)} exits recorded for {expected} SIGTERMs")
    for name, code, took in exits:
        if code != 0:
            what = "was killed past the grace period" if code is None else f"exited {code}"
            bad.append(f"{name} {what} after {took:.1f}s")


def _first_turn(dump: LedgerDump, session_id: str) -> datetime | None:
    for run in dump.runs.get(session_id, []):
        for e in dump.events[run.run_id]:
            if e.type is EventType.ASSISTANT_OUTPUT:
                return e.created_at
    return None


def mixed_figures(
    dump: LedgerDump, mixed: Mixed, exits: Sequence[tuple[str, int | None, float]], out: Findings,
) -> dict[str, Any]:  # fmt: skip
    """Run checks 12-15; the figures (as text for the table, numbers for the result line)."""
    latencies = check_cancels(dump, mixed.cancels, out)
    check_subtrees(dump, mixed.cancels, out)
    fires = mixed.fires()
    lags = check_fires(fires, out)
    dispatched = sum(1 for f in fires if f.outcome is FireOutcome.DISPATCHED)
    check_sigterms(exits, out, expected=mixed.plan.sigterms)
    waits = []
    if mixed.small_sent is not None:
        for sid in mixed.small_ids:
            first = _first_turn(dump, sid)
            if first is not None:
                waits.append((first - mixed.small_sent).total_seconds())
    handovers = sum(
        1
        for events in dump.events.values()
        for e in events
        if e.type is EventType.CONTROL and e.payload.get("kind") == "handover"
    )
    stops = [took for _, _, took in exits]
    out.counts["fire decision lag p50 / p99"] = f"{_ms(lags, 0.5)} / {_ms(lags, 0.99)}"
    out.counts["cancel-to-sealed p50 / max"] = f"{_ms(latencies, 0.5)} / {_ms(latencies, 1.0)}"
    out.counts["small batch queue wait p50 / max"] = f"{_ms(waits, 0.5)} / {_ms(waits, 1.0)}"
    out.counts["backlog queued when the small batch came"] = mixed.backlog_queued_at_small
    out.counts["SIGTERM to exit p50 / max"] = f"{_ms(stops, 0.5)} / {_ms(stops, 1.0)}"
    out.counts["handover events"] = handovers
    out.counts["child completions left pending at a cancelled parent"] = retry(
        lambda: left_at_cancelled(mixed.dsn), what="read the inbox"
    )
    out.counts["runs not completed, cancels aside"] = sum(
        1
        for runs in dump.runs.values()
        for r in runs
        if r.terminal_state not in (TerminalState.COMPLETED, TerminalState.CANCELLED)
    )

    def seconds(samples: list[float], q: float) -> float | None:
        return round(percentile(samples, q), 3) if samples else None

    return {
        "fires": len(lags),
        "fires_dispatched": dispatched,
        "fire_lag_p50_s": seconds(lags, 0.5),
        "fire_lag_p99_s": seconds(lags, 0.99),
        "cancels": len(mixed.cancels),
        "cancel_sealed_p50_s": seconds(latencies, 0.5),
        "cancel_sealed_max_s": seconds(latencies, 1.0),
        "small_wait_p50_s": seconds(waits, 0.5),
        "small_wait_max_s": seconds(waits, 1.0),
        "backlog": len(mixed.backlog_ids),
        "sigterms": len(exits),
        "handovers": handovers,
    }
