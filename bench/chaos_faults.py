"""The faults of a chaos run: kill, stop, restart and cut off the fleet's processes.

Each fault is noted on the :class:`~bench.chaos_rig.Tally` timeline.  A worker
that exits on its own is recorded as a failure of the run and NOT replaced
(a supervisor would hide a crash that the fleet must not have).
With ``--pool prefork`` a session-worker SIGKILL or SIGSTOP hits the pool child
that owns sessions (the OOM killer's way), not the pool parent, which
requeues the child's message and starts a new child.
A mixed run (``--mixed``) adds a deploy's rolling restart: each step
SIGTERMs the longest-running session worker (a replacement starts at once),
which must hand its sessions over and exit 0 within
:data:`~bench.chaos_rig.SIGTERM_GRACE_S`; and its beat process is watched
like the workers (an exit by itself fails the run).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import redis

from bench.chaos_rig import (
    SIGTERM_GRACE_S,
    SIGTERM_KIND,
    STOP_FOR_S,
    Plan,
    RedisServer,
    Tally,
    retry,
    say,
)
from bench.common import ADMIN_DSN
from nahida_workers.testing.fleet import LEASE_DB, Fleet, Worker


class Chaos:
    """The fleet under test and the chaos schedule that runs against it."""

    def __init__(
        self, plan: Plan, fleet: Fleet, server: RedisServer, db_name: str, tally: Tally
    ) -> None:
        self.plan = plan
        self.fleet = fleet
        self.server = server
        self.db_name = db_name
        self.tally = tally
        self.rng = random.Random(plan.seed)
        self.session_workers: list[Worker] = []
        self.tool_worker: Worker | None = None
        self.beat: Worker | None = None  # a mixed run's ``celery beat``
        self.exits: list[threading.Thread] = []  # waiters for SIGTERMed workers
        self.killed: set[str] = set()  # names of workers the harness killed on purpose
        self.starting: list[Future[Worker]] = []
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="start-worker")
        self.stop = threading.Event()
        self._serial = 0
        self._lock = threading.Lock()
        self._watch_lock = threading.Lock()

    # -- workers ----------------------------------------------------------------
    def _name(self, role: str) -> str:
        with self._lock:
            self._serial += 1
            return f"{role}{self._serial}"

    def start_session_worker(self) -> Future[Worker]:
        """Start a session worker in the background; it joins the pool when ready."""

        def start() -> Worker:
            worker = self.fleet.start_worker(
                queues="sessions",
                concurrency=self.plan.concurrency,
                name=self._name("sessions"),
                pool=self.plan.pool,
            )
            with self._lock:
                self.session_workers.append(worker)
            return worker

        future = self.pool.submit(start)
        self.starting.append(future)
        return future

    def start_tool_worker(self) -> Future[Worker]:
        """Start the tool worker in the background."""

        def start() -> Worker:
            worker = self.fleet.start_worker(
                queues="tools", concurrency=8, name=self._name("tools")
            )
            self.tool_worker = worker
            return worker

        future = self.pool.submit(start)
        self.starting.append(future)
        return future

    def start_beat(self) -> Worker:
        """Start ``celery beat`` (the ledger-backed scheduler) and wait until it runs a job."""
        self.beat = self.fleet.start_beat(name=self._name("beat"))
        return self.beat

    def wait_started(self) -> None:
        """Wait for every worker start submitted so far; a failed start is a harness error."""
        for future in list(self.starting):
            try:
                future.result()
            except Exception as exc:
                self.starting.remove(future)
                self.tally.harness_errors.append(f"worker start failed: {exc!r}"[:500])

    def _owners(self) -> Counter[int]:
        """Leases held per worker pid (the owner token is ``host:pid:uuid``)."""
        client = redis.Redis.from_url(f"{self.server.url}/{LEASE_DB}", socket_timeout=2)
        try:
            pids: Counter[int] = Counter()
            for key in client.scan_iter(match=f"{self.fleet.prefix}lease:session:*", count=500):
                value = client.get(key)
                if isinstance(value, bytes):
                    pids[int(value.decode().split(":")[1])] += 1
            return pids
        finally:
            client.close()

    def _live(self, pick: Callable[[], list[Worker]], what: str) -> list[Worker]:
        """Live workers from ``pick``; waits for a replacement still starting (up to 60 s)."""
        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                alive = [w for w in pick() if w.proc.poll() is None and w.name not in self.killed]
            if alive or time.monotonic() > deadline:
                if not alive:
                    raise RuntimeError(f"no live {what} to hit")
                return alive
            self.watchdog()
            self.stop.wait(0.1)

    def _victim(self) -> tuple[Worker, int]:
        """A live session worker, preferring one that owns sessions; with how many it owns."""
        alive = self._live(lambda: self.session_workers, "session worker")
        try:
            owners = self._owners()
        except redis.RedisError:
            owners = Counter()
        busy = [w for w in alive if owners[w.proc.pid]]
        worker = self.rng.choice(busy or alive)
        return worker, owners[worker.proc.pid]

    def _retire(self, worker: Worker) -> None:
        with self._lock:
            self.killed.add(worker.name)
            if worker in self.session_workers:
                self.session_workers.remove(worker)

    def _pool_child(self) -> tuple[Worker, int, int]:
        """A prefork child that owns sessions (else any child): worker, child pid, owned."""
        alive = self._live(lambda: self.session_workers, "session worker")
        try:
            owners = self._owners()
        except redis.RedisError:
            owners = Counter()
        children = [(w, pid) for w in alive for pid in _children(w.proc.pid)]
        if not children:
            raise RuntimeError("no prefork child to hit")
        busy = [(w, pid) for w, pid in children if owners[pid]]
        worker, pid = self.rng.choice(busy or children)
        return worker, pid, owners[pid]

    # -- the events ---------------------------------------------------------------
    def sigkill_session_worker(self) -> None:
        """SIGKILL a session worker that owns sessions; start its replacement.

        Prefork: SIGKILL the pool child that owns sessions; its parent lives on.
        """
        if self.plan.pool == "prefork":
            try:
                worker, pid, owned = self._pool_child()
            except RuntimeError:  # no child yet (a worker still starting): kill a whole one
                pass
            else:
                os.kill(pid, signal.SIGKILL)
                self.tally.note(
                    "sigkill session worker", f"{worker.name} child {pid} (owned {owned})"
                )
                return
        worker, owned = self._victim()
        self._retire(worker)
        worker.kill(signal.SIGKILL)
        worker.proc.wait(timeout=10)
        self.tally.note("sigkill session worker", f"{worker.name} (owned {owned} sessions)")
        self.start_session_worker()

    def sigstop_session_worker(self) -> None:
        """SIGSTOP a session worker (prefork: a pool child) past the lease TTL, then SIGCONT it."""
        if self.plan.pool == "prefork" and any(
            _children(w.proc.pid) for w in list(self.session_workers)
        ):
            worker, pid, owned = self._pool_child()
            target, what = pid, f"{worker.name} child {pid}"
        else:
            worker, owned = self._victim()
            target, what = worker.proc.pid, worker.name
        os.kill(target, signal.SIGSTOP)
        self.tally.note("sigstop session worker", f"{what} (owned {owned}) for {STOP_FOR_S:.1f}s")
        try:
            self.stop.wait(STOP_FOR_S)  # the pause itself, not a synchronisation
        finally:
            try:
                os.kill(target, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def sigterm_session_worker(self) -> None:
        """A rolling restart's step: SIGTERM the oldest session worker; start its replacement.

        The SIGTERMed worker hands its sessions over at their next boundary
        (the live workers take them) and exits; a thread waits for that and
        puts its exit code and the seconds it took on the tally (``None``:
        it outlived :data:`SIGTERM_GRACE_S` and was killed -- a failure of
        the run), so the rest of the schedule keeps its times.
        """
        alive = self._live(lambda: self.session_workers, "session worker")
        worker = alive[0]  # the longest-running: a rolling restart replaces every one in turn
        try:
            owned = self._owners()[worker.proc.pid]
        except redis.RedisError:
            owned = -1
        self._retire(worker)
        worker.kill(signal.SIGTERM)
        started = time.monotonic()
        self.tally.note(SIGTERM_KIND, f"{worker.name} (owned {owned} sessions)")
        self.start_session_worker()

        def wait_exit() -> None:
            try:
                code: int | None = worker.proc.wait(timeout=SIGTERM_GRACE_S)
            except subprocess.TimeoutExpired:
                code = None
                worker.kill(signal.SIGKILL)
                worker.proc.wait(timeout=10)
            took = time.monotonic() - started
            self.tally.sigterm_exits.append((worker.name, code, took))
            say(f"chaos: {worker.name} exited {code} {took:.1f}s after its SIGTERM")

        waiter = threading.Thread(target=wait_exit, name=f"exit-{worker.name}", daemon=True)
        waiter.start()
        self.exits.append(waiter)

    def wait_exits(self) -> None:
        """Wait for every SIGTERMed worker's exit to be recorded."""
        for waiter in self.exits:
            waiter.join(timeout=SIGTERM_GRACE_S + 30)

    def sigkill_tool_worker(self) -> None:
        """SIGKILL the tool worker; start its replacement."""
        (worker,) = self._live(
            lambda: [self.tool_worker] if self.tool_worker else [], "tool worker"
        )
        self.killed.add(worker.name)
        worker.kill(signal.SIGKILL)
        worker.proc.wait(timeout=10)
        self.tally.note("sigkill tool worker", worker.name)
        self.start_tool_worker()

    def restart_redis(self) -> None:
        """Terminate the Redis server and start a new, empty one on the same port."""
        self.server.restart()
        self.tally.note(
            "redis restart", f"port {self.server.port}, generation {self.server.generation}"
        )

    def terminate_pg(self) -> None:
        """``pg_terminate_backend`` every other backend connected to the chaos database."""

        def terminate() -> int:
            with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.db_name,),
                ).fetchall()
            return sum(1 for (ok,) in rows if ok)

        count = retry(terminate, what="pg_terminate_backend")
        self.tally.pg_backends_terminated += count
        self.tally.note("pg terminate backends", f"{count} backends")

    def watchdog(self) -> None:
        """Record a worker that exited without being killed: a failure of the run."""
        with self._watch_lock:
            self._record_self_exits()

    def _record_self_exits(self) -> None:
        """Note each worker that exited by itself; it is not replaced (that would hide it)."""
        with self._lock:
            workers = [
                *self.session_workers,
                *([self.tool_worker] if self.tool_worker else []),
                *([self.beat] if self.beat else []),
            ]
        for worker in workers:
            code = worker.proc.poll()
            if code is None or worker.name in self.killed:
                continue
            self.killed.add(worker.name)
            lines = worker.text().splitlines()
            why = next((ln for ln in lines if "CRITICAL" in ln), lines[-1] if lines else "")
            self.tally.unexpected_exits.append(f"{worker.name} exited {code}: {why[:300]}")
            say(f"FAILURE: {worker.name} exited by itself with code {code}; not replaced")
            if worker in self.session_workers:
                self._retire(worker)

    def run_schedule(self) -> None:
        """Fire the events at evenly spaced times over 10-85% of the window, in seeded order."""
        events = self.plan.events
        self.rng.shuffle(events)
        actions = {
            "sigkill session worker": self.sigkill_session_worker,
            "sigstop session worker": self.sigstop_session_worker,
            SIGTERM_KIND: self.sigterm_session_worker,
            "sigkill tool worker": self.sigkill_tool_worker,
            "redis restart": self.restart_redis,
            "pg terminate backends": self.terminate_pg,
        }
        start = time.monotonic()
        for i, kind in enumerate(events):
            at = start + self.plan.window_s * (0.1 + 0.75 * i / max(1, len(events) - 1))
            while time.monotonic() < at and not self.stop.is_set():
                self.watchdog()
                self.stop.wait(0.2)
            if self.stop.is_set():
                return
            try:
                actions[kind]()
            except Exception as exc:  # a chaos step failed: say so, keep going
                say(f"WARNING: chaos step {kind} failed: {exc!r}")
                self.tally.timeline.append(f"{kind} FAILED: {exc!r}")


def _children(pid: int) -> list[int]:
    """Child process ids of ``pid`` (Linux ``/proc``; empty when it is gone)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        return []
    return out
