"""Handover of running sessions when their worker stops: SIGTERM against SIGKILL.

DESIGN.md section 8 (shutdown).  Worker A owns N running sessions; each is a
chain of short Bash steps (``--step`` seconds each, ``--steps`` turns), so a
boundary is always near.  Worker B is started and warmed up; then A gets a
signal at t0, and for every session the benchmark reads the ledger:

* **handover** = t0 -> the next owner's first ledger event (the first event
  written at epoch 2), per session;
* for SIGTERM also t0 -> A's ``handover`` event (the running step finishing)
  and that event -> the next owner's first event (the handover proper).

SIGTERM (a warm shutdown) brings each session to its next boundary, commits,
releases the lease and delivers the session again; SIGKILL leaves the lease
to expire (``--ttl``) and the message to the broker's visibility timeout
(``--visibility``), so its handover is the baseline measured in the same
run.  Invariants, checked for both: every session completes, no command runs
twice (each step appends one line to a file), and after SIGTERM no call is
interrupted.

    python -m bench.handover                  # 4 sessions, TTL 10 s, visibility 30 s
    python -m bench.handover --pool prefork
    python -m bench.handover --quick          # CI smoke: 2 sessions, TTL 3 s

Exits 1 when an invariant fails, or (not in ``--quick``: a shared machine's
wall times are noise) when a SIGTERM handover took as long as the lease TTL.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import scratch_database
from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, Worker, make_repo, submit, wait_done, wait_for


@dataclass
class Outcome:
    """What one mode (SIGTERM or SIGKILL) measured."""

    mode: str
    handover_s: list[float] = field(default_factory=list)
    to_boundary_s: list[float] = field(default_factory=list)
    boundary_to_next_s: list[float] = field(default_factory=list)
    interrupted: int = 0
    duplicates: int = 0
    incomplete: int = 0
    worker_exit: int | None = None


def chain_spec(marker: Path, steps: int, step_s: float) -> Any:
    """``steps`` turns of one Bash step each (append a line, sleep), then an answer."""
    turns: list[dict[str, Any]] = [
        {
            "text": f"step {k}",
            "tool_calls": [
                {
                    "id": f"s{k}",
                    "name": "Bash",
                    "arguments": {"command": f"echo s{k} >> {marker}; sleep {step_s}"},
                }
            ],
        }
        for k in range(steps)
    ]
    turns.append({"text": "Done."})
    return scripted_spec(turns, tools=("Bash",), limits={"max_steps": steps + 2})


def _running_on_a(ledger: SqlLedger, sids: list[str]) -> bool:
    """Every session has committed at least two step results (it runs on A)."""
    for sid in sids:
        runs = ledger.runs_of(sid)
        if not runs:
            return False
        results = [e for e in ledger.events(runs[0].run_id) if e.type is EventType.TOOL_RESULT]
        if len(results) < 2:
            return False
    return True


def _warm(worker: Worker) -> bool:
    return "warmed up" in worker.text()


def run_mode(
    mode: str, url: str, root: Path, args: argparse.Namespace, ledger: SqlLedger
) -> Outcome:
    """Start A, run N sessions on it, start B, signal A, measure the handovers."""
    logs = root / f"logs-{mode}"
    logs.mkdir()
    fleet = Fleet(
        postgres_url=url,
        redis_url=args.redis,
        workdir=logs,
        lease_ttl_s=args.ttl,
        visibility_timeout_s=args.visibility,
    )
    out = Outcome(mode)
    try:
        a = fleet.start_worker(name=f"{mode}-A", concurrency=args.sessions, pool=args.pool)
        dispatcher = fleet.dispatcher(ledger)
        repos = [make_repo(root / f"{mode}-r{i}") for i in range(args.sessions)]
        # Each session's marker is in its own workspace: the sandbox lets Bash write nowhere else.
        markers = [repo / "marker.txt" for repo in repos]
        specs = [chain_spec(m, args.steps, args.step) for m in markers]
        sids = [submit(dispatcher, spec, repo) for spec, repo in zip(specs, repos, strict=True)]
        wait_for(lambda: _running_on_a(ledger, sids), timeout=60, what="every session on A")
        b = fleet.start_worker(name=f"{mode}-B", concurrency=args.sessions, pool=args.pool)
        wait_for(lambda: _warm(b), timeout=30, what="B to warm up")
        t0 = time.time()
        a.kill(signal.SIGTERM if mode == "sigterm" else signal.SIGKILL)
        if any(s is None or s.status.value == "done" for s in map(ledger.get_session, sids)):
            raise RuntimeError("a session ended before the signal: raise --steps")
        for sid in sids:
            wait_done(ledger, sid, timeout=args.ttl + args.visibility + args.steps * args.step + 60)
        out.worker_exit = a.proc.wait(timeout=30)
        for sid, marker in zip(sids, markers, strict=True):
            _measure(ledger, sid, marker, t0, out)
    except Exception:
        for w in fleet.workers:
            print(f"--- {w.name} log tail ---\n{w.text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        fleet.stop()
    return out


def _measure(ledger: SqlLedger, sid: str, marker: Path, t0: float, out: Outcome) -> None:
    """One session's handover figures and invariants."""
    (run,) = ledger.runs_of(sid)
    if run.terminal_state is None or run.terminal_state.value != "completed":
        out.incomplete += 1
    events = ledger.events(run.run_id)
    first_new = min(e.created_at.timestamp() for e in events if e.epoch >= 2)
    out.handover_s.append(first_new - t0)
    handovers = [e for e in events if e.payload.get("kind") == "handover"]
    if handovers:
        at = handovers[0].created_at.timestamp()
        out.to_boundary_s.append(at - t0)
        out.boundary_to_next_s.append(first_new - at)
    out.interrupted += sum(
        1
        for e in events
        if e.type is EventType.TOOL_RESULT and e.payload["status"] == ToolStatus.INTERRUPTED.value
    )
    lines = Counter(marker.read_text().splitlines())
    out.duplicates += sum(n - 1 for n in lines.values() if n > 1)


def _figures(samples: list[float]) -> str:
    if not samples:
        return "n/a"
    return f"p50 {statistics.median(samples):.2f} s, max {max(samples):.2f} s"


def report(term: Outcome, kill: Outcome, args: argparse.Namespace) -> bool:
    """Print the figures; True when every invariant held."""
    print(
        f"handover after SIGTERM: {_figures(term.handover_s)} "
        f"({args.sessions} sessions, pool {args.pool}; SIGTERM -> next owner's first ledger event)"
    )
    print(f"  SIGTERM -> running step finished, handover committed: {_figures(term.to_boundary_s)}")
    print(f"  handover event -> next owner's first event: {_figures(term.boundary_to_next_s)}")
    print(
        f"handover after SIGKILL: {_figures(kill.handover_s)} "
        f"(lease TTL {args.ttl:g} s, visibility timeout {args.visibility:g} s)"
    )
    if term.handover_s and kill.handover_s:
        ratio = statistics.median(kill.handover_s) / max(statistics.median(term.handover_s), 1e-3)
        print(f"SIGKILL/SIGTERM handover ratio (p50): {ratio:.1f}x")
    ok = (
        term.incomplete == kill.incomplete == 0
        and term.duplicates == kill.duplicates == 0
        and term.interrupted == 0
        and term.worker_exit == 0
        and len(term.to_boundary_s) == args.sessions
    )
    print(
        f"invariants: sessions not completed {term.incomplete + kill.incomplete}; "
        f"commands run twice {term.duplicates + kill.duplicates}; "
        f"interrupted calls after SIGTERM {term.interrupted} (after SIGKILL {kill.interrupted}); "
        f"SIGTERMed worker exit code {term.worker_exit}; "
        f"handover events {len(term.to_boundary_s)}/{args.sessions} -> {'ok' if ok else 'FAILED'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4, help="sessions owned by worker A")
    parser.add_argument("--steps", type=int, default=80, help="Bash steps per session")
    parser.add_argument("--step", type=float, default=0.25, help="seconds per step")
    parser.add_argument("--ttl", type=float, default=10.0, help="lease TTL, seconds")
    parser.add_argument("--visibility", type=float, default=30.0, help="visibility timeout, s")
    parser.add_argument("--pool", default="threads", choices=("threads", "prefork"))
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis base URL")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 2 sessions, TTL 3 s")
    parser.add_argument("--keep", type=Path, default=None, help="keep worker logs in this dir")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions, args.steps, args.step, args.ttl, args.visibility = 2, 120, 0.2, 3.0, 6.0
    with (
        scratch_database("nahida_bench_handover") as (url, _dsn),
        tempfile.TemporaryDirectory(prefix="nahida-bench-handover-") as tmp,
    ):
        root = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix="handover-", dir=args.keep))
        engine = make_engine(url)
        upgrade(engine)
        ledger = SqlLedger(engine=engine)
        try:
            term = run_mode("sigterm", url, root, args, ledger)
            kill = run_mode("sigkill", url, root, args, ledger)
        finally:
            engine.dispose()
        ok = report(term, kill, args)
    fast = bool(term.handover_s) and max(term.handover_s) < args.ttl
    return 0 if ok and (args.quick or fast) else 1


if __name__ == "__main__":
    sys.exit(main())
