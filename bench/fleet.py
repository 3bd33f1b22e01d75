"""Throughput, latency and memory of the real distributed fleet (DESIGN.md section 1).

Workload: bench/loop.py's -- per session 10 provider turns x 4 no-op tool
calls (``nahida_workers.testing.tools:Noop``, registered by the test fleet so the
workers can build it), then a final answer; zero-latency scripted provider.
N sessions are dispatched (ledger row + outbox, then a publish) through the
real Redis broker to 2 ``celery -A tasks worker -Q sessions`` processes; 1
``-Q tools`` process serves the ``tools`` queue (Noop is ``local``
placement, so it idles unless ``--remote-noop`` sends the calls there).
Everything runs on this machine: PostgreSQL, Redis and the workers.

Reported:

* wall time from the first dispatch to the last terminal event, and
  sessions/s over it;
* p50/p99 session latency: the run's ``ended_at - started_at`` from
  ``agent_runs`` (``started_at`` is the dispatch, so this includes the time
  queued behind the other sessions), and its split into queued (dispatch to
  the owner's first write) and running (first write to terminal);
* RSS per worker process (``/proc/<pid>/status``: VmRSS now, VmHWM peak) after
  the first 100 sessions finished and after all N: memory must not grow with
  the number of sessions served (more than ``FLAT_MB`` counts as growth);
* counts by terminal state -- every session must end ``completed``.

    python -m bench.fleet --sessions 500    # exits 1 unless every session completed
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import percentile, scratch_database
from bench.loop import CALLS, TURNS, script
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, Worker

NOOP = "Noop"  # registered by the test fleet (NAHIDA_EXTRA_TOOLS)
#: Growth of a worker's RSS between the checkpoint and the end that still
#: counts as flat, in MB: allocator noise of these workers stayed under 1 MB
#: from 100 to 500 sessions, while a leak of a few hundred bytes per tool call
#: (20 000 calls in a 500-session run) crosses 2 MB.
FLAT_MB = 2.0
#: Seconds between samples of progress and RSS.
SAMPLE_S = 0.1


def memory_mb(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of a process, in MB (from ``/proc/<pid>/status``)."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024.0  # kB
    return values["VmRSS"], values["VmHWM"]


@dataclass
class Monitor:
    """Samples finished sessions and worker memory on its own thread.

    Records each worker's ``(VmRSS, VmHWM)`` when ``checkpoint`` sessions have
    finished and when ``total`` have (or at :meth:`stop`); with ``every`` > 0
    also each time another ``every`` sessions have finished (``samples``:
    sessions finished -> per-worker sample), so the growth's shape shows.
    """

    dsn: str
    workers: list[Worker]
    checkpoint: int
    total: int
    every: int = 0
    finished: int = 0
    samples: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)
    at_checkpoint: dict[str, tuple[float, float]] = field(default_factory=dict)
    at_end: dict[str, tuple[float, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sampling."""
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float) -> bool:
        """Wait until every session finished; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.finished < self.total and time.monotonic() < deadline:
            time.sleep(SAMPLE_S)
        self.stop()
        return self.finished >= self.total

    def stop(self) -> None:
        """Stop sampling (takes the end sample if none was taken)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.at_end:
            self.at_end = self._sample()

    def _sample(self) -> dict[str, tuple[float, float]]:
        out = {}
        for worker in self.workers:
            try:
                out[worker.name] = memory_mb(worker.proc.pid)
            except OSError:  # the process is gone (it crashed; its log says why)
                continue
        return out

    def _intermediate(self) -> None:
        """Take the next ``every``-sessions sample if it is due."""
        if self.every <= 0:
            return
        due = (self.finished // self.every) * self.every
        if due > 0 and due not in self.samples:
            self.samples[due] = self._sample()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM agent_runs WHERE terminal_state IS NOT NULL"
                ).fetchone()
                self.finished = int(row[0]) if row else 0
                if not self.at_checkpoint and self.finished >= self.checkpoint:
                    self.at_checkpoint = self._sample()
                self._intermediate()
                if self.finished >= self.total:
                    self.at_end = self._sample()
                    return
                self._stop.wait(SAMPLE_S)


def start_workers(fleet: Fleet, args: argparse.Namespace) -> tuple[list[Worker], Worker]:
    """Start the session workers and the tool worker in parallel (faster start-up)."""
    names = [f"bench-sessions{i + 1}" for i in range(args.session_workers)]
    with ThreadPoolExecutor(max_workers=len(names) + 1) as pool:
        sessions = [
            pool.submit(
                fleet.start_worker, queues="sessions", concurrency=args.concurrency, name=name
            )
            for name in names
        ]
        tools = pool.submit(
            fleet.start_worker,
            queues="tools",
            concurrency=args.tool_concurrency,
            name="bench-tools",
        )
        return [f.result() for f in sessions], tools.result()


def report(dsn: str, first_dispatch: datetime, n: int) -> bool:
    """Print latency, throughput and terminal states; True if all N completed."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT concat_ws('/', r.terminal_state, r.terminal_reason, r.failure_code),"
            " EXTRACT(EPOCH FROM r.ended_at - r.started_at),"
            " EXTRACT(EPOCH FROM min(e.created_at) - r.started_at),"
            " EXTRACT(EPOCH FROM r.ended_at - min(e.created_at)), r.ended_at"
            " FROM agent_runs r LEFT JOIN agent_run_events e"
            " ON e.run_id = r.run_id AND e.epoch >= 1"
            " GROUP BY r.run_id"
        ).fetchall()
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()
    states: dict[str, int] = {}
    for row in rows:
        states[row[0] or "not terminal"] = states.get(row[0] or "not terminal", 0) + 1
    done = [r for r in rows if r[4] is not None]
    if done:
        last = max(r[4] for r in done)
        wall = (last - first_dispatch).total_seconds()
        latency = [float(r[1]) for r in done]
        queued = [float(r[2]) for r in done if r[2] is not None]
        running = [float(r[3]) for r in done if r[3] is not None]
        print(
            f"wall (first dispatch -> last terminal): {wall:.2f} s; "
            f"throughput: {len(done) / wall:.1f} sessions/s"
        )
        for label, samples in (
            ("latency (ended_at - started_at)", latency),
            ("  queued (dispatch -> owner's first write)", queued),
            ("  running (first write -> terminal)", running),
        ):
            print(
                f"{label}: p50 {statistics.median(samples) * 1000:.0f} ms, "
                f"p99 {percentile(samples, 0.99) * 1000:.0f} ms"
            )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
    total = sessions[0] if sessions else 0
    print(f"terminal states: {counts} (sessions {total}, runs {len(rows)})")
    completed = sum(v for k, v in states.items() if k.split("/")[0] == "completed")
    all_completed = total == n and len(rows) == n and completed == n
    print(f"every session completed: {'yes' if all_completed else 'NO'}")
    return all_completed


def memory_report(monitor: Monitor, checkpoint: int, finished: int) -> None:
    """Print RSS per worker at the checkpoint and at the end, and the verdict."""
    grew = []
    for name, (rss_end, hwm_end) in monitor.at_end.items():
        rss_cp, hwm_cp = monitor.at_checkpoint.get(name, (float("nan"), float("nan")))
        growth = rss_end - rss_cp
        if growth > FLAT_MB:
            grew.append(name)
        print(
            f"RSS {name}: after {checkpoint} sessions {rss_cp:.1f} MB (peak {hwm_cp:.1f}), "
            f"after {finished} {rss_end:.1f} MB (peak {hwm_end:.1f}); "
            f"growth {growth:+.1f} MB (peak {hwm_end - hwm_cp:+.1f}; "
            f"{growth * 1024 / max(1, finished - checkpoint):+.2f} KB"
            " per session the fleet finished)"
        )
    for done, sample in sorted(monitor.samples.items()):
        cells = ", ".join(f"{name} {rss:.1f}" for name, (rss, _) in sorted(sample.items()))
        print(f"RSS after {done} sessions (MB): {cells}")
    if not monitor.at_checkpoint:
        print("memory: no checkpoint sample (too few sessions finished)")
    elif grew:
        print(f"memory: GREW by more than {FLAT_MB:.0f} MB on {', '.join(grew)}")
    else:
        print(
            f"memory: flat -- no worker grew by more than {FLAT_MB:.0f} MB "
            f"from {checkpoint} to {finished} sessions"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--checkpoint", type=int, default=100, help="first RSS sample")
    parser.add_argument(
        "--rss-every", type=int, default=0, help="also sample RSS every N finished sessions"
    )
    parser.add_argument("--session-workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4, help="threads per session worker")
    parser.add_argument("--tool-concurrency", type=int, default=8, help="tool worker threads")
    parser.add_argument("--remote-noop", action="store_true", help="Noop on the tools queue")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis base URL")
    parser.add_argument("--timeout", type=float, default=0.0, help="s (default: from N)")
    args = parser.parse_args(argv)
    n = args.sessions
    # Small runs (CI smoke) sample at a fifth of the sessions instead.
    checkpoint = min(args.checkpoint, max(1, n // 5))
    timeout_s = args.timeout or 60.0 + n * 0.5
    turns: list[Mapping[str, Any]] = [*script()]
    spec = scripted_spec(
        turns, tools=[NOOP], placement={"Noop": "remote"} if args.remote_noop else {}
    )
    with (
        scratch_database("nahida_bench_fleet") as (url, dsn),
        tempfile.TemporaryDirectory(prefix="nahida-bench-fleet-") as tmp,
    ):
        root = Path(tmp)
        (root / "logs").mkdir()
        engine = make_engine(url)
        upgrade(engine)
        ledger = SqlLedger(engine=engine)
        # Production lease TTL and visibility timeout: a session queued behind
        # hundreds of others must not be redelivered while it waits.
        fleet = Fleet(
            postgres_url=url,
            redis_url=args.redis,
            workdir=root / "logs",
            lease_ttl_s=30.0,
            visibility_timeout_s=300.0,
        )
        monitor: Monitor | None = None
        try:
            session_workers, tool_worker = start_workers(fleet, args)
            dispatcher = fleet.dispatcher(ledger)
            monitor = Monitor(
                dsn, [*session_workers, tool_worker], checkpoint, n, every=args.rss_every
            )
            monitor.start()
            first_dispatch = datetime.now(UTC)
            for _ in range(n):
                dispatcher.submit(spec, workspace=str(root))
            dispatched_s = (datetime.now(UTC) - first_dispatch).total_seconds()
            finished = monitor.wait(timeout_s)
            print(
                f"workload: {n} sessions x {TURNS} turns x {CALLS} Noop calls "
                f"({'remote' if args.remote_noop else 'local'} placement); "
                f"{args.session_workers} session workers (threads, -c {args.concurrency}) + "
                f"1 tool worker (-c {args.tool_concurrency}); Redis broker, PostgreSQL ledger; "
                f"{os.cpu_count()} CPUs; dispatch took {dispatched_s:.2f} s"
            )
            if not finished:
                print(f"TIMEOUT: {monitor.finished}/{n} sessions finished in {timeout_s:.0f} s")
            all_completed = report(dsn, first_dispatch, n)
            memory_report(monitor, checkpoint, monitor.finished)
        except Exception:
            for w in fleet.workers:
                print(f"--- {w.name} log tail ---\n{w.text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if monitor is not None:
                monitor.stop()
            fleet.stop()
            engine.dispose()
    return 0 if finished and all_completed else 1


if __name__ == "__main__":
    sys.exit(main())
