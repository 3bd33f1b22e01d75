"""Chaos run of the real fleet: crashes, pauses and outages lose nothing and repeat nothing.

Issue 6 item 6.  N sessions of a scripted plan run on K ``celery -A tasks
worker -Q sessions`` processes and one ``-Q tools`` process, over a private
``redis-server`` (a free port, no persistence) and a scratch PostgreSQL
database.  While they run, the harness SIGKILLs session workers that own
leases (a replacement is started each time), SIGSTOPs one past the lease TTL
and resumes it, SIGKILLs the tool worker once, restarts Redis once (every
queued message and lease is lost), terminates every PostgreSQL backend of the
database once, and posts steering messages, some twice under one id.  A
sweeper runs in this process every second, as celery beat would.

Each session's plan: a fan-out of Glob (local) + Read and Grep (``tools``
queue); a Bash that sleeps (the window most kills land in); one
``DeliverOnce`` (``nahida_workers.testing_tools``: deliver-kind, not
idempotent, appends one line per real execution to one file); then "Done."
-- spare answers follow for steering that arrives at the end of a run.

When every session is ``done`` and every steering message acknowledged, the
workers are stopped and the ledger is checked (each check says what it
proves and which DESIGN.md rule it is):

1. one terminal event per run, and it is the run's last (sections 2 and 6);
2. DeliverOnce executed at most once per idempotency key, exactly once for
   every call committed ``ok``, never for a call that was not committed
   (sections 3 and 5);
3. every steering message acknowledged, seen as exactly one ``user_input``
   (section 8);
4. no row written with a stale fencing epoch (section 4);
5. every run's projected transcript is a valid OpenAI and Anthropic request
   (section 3 step 1).

    python -m bench.chaos --sessions 200 --workers 3    # exits 1 on any violation
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import logging
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import redis
from rich.console import Console
from rich.table import Table

from bench.common import ADMIN_DSN, scratch_database
from nahida_workers.core.events import Event, EventType, SessionStatus, ToolStatus
from nahida_workers.core.messages import ProviderRequest
from nahida_workers.core.records import InboxStatus
from nahida_workers.core.transcript import project
from nahida_workers.fleet_harness import BROKER_DB, LEASE_DB, Fleet, Worker, make_repo
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import Ledger, SystemClock
from nahida_workers.providers.payloads import anthropic_messages, openai_messages
from nahida_workers.providers.validate import validate_anthropic_messages, validate_openai_messages
from nahida_workers.runtime.dispatcher import Dispatcher
from nahida_workers.runtime.inbox import Inbox
from nahida_workers.runtime.sweeper import Sweeper
from nahida_workers.testing import scripted_spec
from tasks.maintenance import BROKER_RUN_ID_KEY

T = TypeVar("T")
DELIVER = "nahida_workers.testing_tools:DeliverOnce"
TOOLS = ("Glob", "Read", "Grep", "Bash", DELIVER)
LEASE_TTL_S = 2.0
VISIBILITY_TIMEOUT_S = 8.0
SWEEP_EVERY_S = 1.0
REDISPATCH_AFTER_S = 3.0
#: A queued session's message counts as lost after this (production: the
#: visibility timeout; see ``Sweeper.redispatch_queued_after_s``).
REDISPATCH_QUEUED_AFTER_S = VISIBILITY_TIMEOUT_S
#: How long a SIGSTOPped worker stays stopped: well past the lease TTL.
STOP_FOR_S = LEASE_TTL_S * 1.75
#: How long Redis stays down between the old server's exit and the new one's start.
REDIS_DOWN_S = 0.5
#: Spare answers after "Done.": steering pending at a candidate answer takes one
#: more provider turn each time; distinct texts keep the repeated-text bound quiet.
SPARE_ANSWERS = ("Done (update noted).", "Noted; done.", "Done again.", "Finished.", "All done.")
KILL_KINDS = (
    "sigkill session worker",
    "sigstop session worker",
    "sigkill tool worker",
    "redis restart",
    "pg terminate backends",
)

console = Console(highlight=False, width=120)


def clock_ms() -> str:
    """Wall-clock time of day with milliseconds (lines up with worker logs and the ledger)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def say(text: str) -> None:
    """One timestamped progress line."""
    console.print(f"[{clock_ms()}] {text}", markup=False)


def retry(fn: Callable[[], T], *, what: str, give_up_s: float = 120.0) -> T:
    """Call ``fn`` until it succeeds: the harness rides out the outages it causes.

    Raises:
        RuntimeError: ``give_up_s`` seconds passed without a success (chained
            to the last error).
    """
    deadline, pause = time.monotonic() + give_up_s, 0.1
    while True:
        try:
            return fn()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: still failing after {give_up_s:.0f}s") from exc
            time.sleep(pause)
            pause = min(1.0, pause * 2)


# -- the plan -------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """Sizes of one chaos run (the CI run and the large run differ only in these)."""

    sessions: int
    workers: int
    concurrency: int
    window_s: float
    sigkills: int
    sigstops: int
    steering: int
    seed: int
    timeout_s: float

    @property
    def events(self) -> list[str]:
        """The chaos events, one entry per event (order chosen by the seed)."""
        return (
            ["sigkill session worker"] * self.sigkills
            + ["sigstop session worker"] * self.sigstops
            + ["sigkill tool worker", "redis restart", "pg terminate backends"]
        )


def plan_for(args: argparse.Namespace) -> Plan:
    """Scale the schedule with N: about 0.3 s of chaos window per session, at least 16 s."""
    n = args.sessions
    window = args.window or max(16.0, 0.3 * n)
    return Plan(
        sessions=n,
        workers=args.workers,
        concurrency=args.concurrency,
        window_s=window,
        sigkills=args.sigkills if args.sigkills is not None else max(2, n // 40),
        sigstops=args.sigstops if args.sigstops is not None else max(1, n // 100),
        steering=args.steering if args.steering is not None else max(6, n // 3),
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(10**6),
        timeout_s=args.timeout or window + 180.0 + 0.5 * n,
    )


def script(i: int, deliveries: Path) -> list[Mapping[str, Any]]:
    """The scripted turns of session ``i`` (the same for every run of it)."""
    return [
        {
            "text": "Looking around.",
            "tool_calls": [
                {"id": "glob", "name": "Glob", "arguments": {"pattern": "**/*.py"}},
                {"id": "read", "name": "Read", "arguments": {"path": "README.md"}},
                {"id": "grep", "name": "Grep", "arguments": {"pattern": "TODO"}},
            ],
        },
        {
            "text": "Checking the repository.",
            "tool_calls": [
                {
                    "id": "bash",
                    "name": "Bash",
                    "arguments": {"command": "sleep 0.8; git rev-parse HEAD"},
                }
            ],
        },
        {
            "text": "Delivering.",
            "tool_calls": [
                {
                    "id": "deliver",
                    "name": "DeliverOnce",
                    "arguments": {"log": str(deliveries), "text": f"session {i}"},
                }
            ],
        },
        {"text": "Done."},
        *({"text": text} for text in SPARE_ANSWERS),
    ]


# -- our own Redis ------------------------------------------------------------------
def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private ``redis-server`` on a free port, restartable on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0

    @property
    def url(self) -> str:
        """Base URL (no database)."""
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start a server and wait until it answers PING."""
        self.generation += 1
        with (self.workdir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--daemonize", "no", "--dir", str(self.workdir)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        """Terminate the server (no persistence: every key is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def restart(self) -> None:
        """Stop, stay down :data:`REDIS_DOWN_S`, start a fresh server on the same port."""
        self.stop()
        time.sleep(REDIS_DOWN_S)  # the outage itself, not a synchronisation
        self.start()


# -- shared state of the harness threads -----------------------------------------------
@dataclass
class Tally:
    """What the harness did and saw while the chaos ran."""

    kills: Counter[str] = field(default_factory=Counter)
    timeline: list[str] = field(default_factory=list)
    steering_sent: dict[str, str] = field(default_factory=dict)  # message id -> session id
    steering_duplicates: int = 0
    sweeps: int = 0
    sweep_errors: Counter[str] = field(default_factory=Counter)
    broker_resets: int = 0
    redispatched: int = 0
    unexpected_exits: list[str] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)
    pg_backends_terminated: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float = field(default_factory=time.monotonic)

    def note(self, kind: str, detail: str) -> None:
        """Count a chaos event of ``kind`` and put it on the timeline."""
        with self.lock:
            self.kills[kind] += 1
            at = f"t+{time.monotonic() - self.t0:5.1f}s ({clock_ms()})"
            self.timeline.append(f"{at} {kind}: {detail}")
        say(f"chaos: {kind}: {detail}")


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
                queues="sessions", concurrency=self.plan.concurrency, name=self._name("sessions")
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

    # -- the events ---------------------------------------------------------------
    def sigkill_session_worker(self) -> None:
        """SIGKILL a session worker that owns sessions; start its replacement."""
        worker, owned = self._victim()
        self._retire(worker)
        worker.kill(signal.SIGKILL)
        worker.proc.wait(timeout=10)
        self.tally.note("sigkill session worker", f"{worker.name} (owned {owned} sessions)")
        self.start_session_worker()

    def sigstop_session_worker(self) -> None:
        """SIGSTOP a session worker for longer than the lease TTL, then SIGCONT it."""
        worker, owned = self._victim()
        worker.kill(signal.SIGSTOP)
        self.tally.note(
            "sigstop session worker", f"{worker.name} (owned {owned}) for {STOP_FOR_S:.1f}s"
        )
        try:
            self.stop.wait(STOP_FOR_S)  # the pause itself, not a synchronisation
        finally:
            worker.kill(signal.SIGCONT)

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
        """Replace a worker that exited without being killed (reported, not hidden)."""
        with self._watch_lock:
            self._watchdog()

    def _watchdog(self) -> None:
        with self._lock:
            workers = [*self.session_workers, *([self.tool_worker] if self.tool_worker else [])]
        for worker in workers:
            code = worker.proc.poll()
            if code is None or worker.name in self.killed:
                continue
            self.killed.add(worker.name)
            lines = worker.text().splitlines()
            why = next((ln for ln in lines if "CRITICAL" in ln), lines[-1] if lines else "")
            self.tally.unexpected_exits.append(f"{worker.name} exited {code}: {why[:300]}")
            say(f"WARNING: {worker.name} exited by itself with code {code}; replacing it")
            if worker is self.tool_worker:
                self.start_tool_worker()
            else:
                self._retire(worker)
                self.start_session_worker()

    def run_schedule(self) -> None:
        """Fire the events at evenly spaced times over 10-85% of the window, in seeded order."""
        events = self.plan.events
        self.rng.shuffle(events)
        actions = {
            "sigkill session worker": self.sigkill_session_worker,
            "sigstop session worker": self.sigstop_session_worker,
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


# -- background work: sweeper, steering, dispatch ----------------------------------------
def guarded(target: Callable[..., None], tally: Tally) -> Callable[..., None]:
    """``target`` that records an exception instead of dying silently on its thread."""

    def run(*args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:
            tally.harness_errors.append(f"{getattr(target, '__name__', target)}: {exc!r}")
            say(f"HARNESS ERROR in {getattr(target, '__name__', target)}: {exc!r}")

    return run


def sweeper_loop(sweeper: Sweeper, tally: Tally, stop: threading.Event) -> None:
    """Sweep every :data:`SWEEP_EVERY_S` (celery beat's job), surviving every outage."""
    while not stop.wait(SWEEP_EVERY_S):
        try:
            report = sweeper.sweep()
        except Exception as exc:
            tally.sweep_errors[type(exc).__name__] += 1
            continue
        tally.sweeps += 1
        tally.redispatched += len(report.redispatched)
        if report.broker_reset:
            tally.broker_resets += 1
            say(f"sweeper: broker reset seen; re-dispatched {len(report.redispatched)} sessions")


def steering_loop(
    plan: Plan, inbox: Inbox, targets: list[str], tally: Tally, stop: threading.Event
) -> None:
    """Post ``plan.steering`` messages over the window; every third one twice, same id.

    The second copy goes out 0.1-2 s after the first (it may find the message
    pending, claimed or already acknowledged: each must stay one message).
    """
    rng = random.Random(plan.seed + 1)
    start = time.monotonic()
    resend: list[tuple[float, str, str, str]] = []

    def post(session_id: str, message_id: str, text: str) -> None:
        retry(
            lambda: inbox.post(session_id, text, message_id=message_id),
            what=f"steering message {message_id}",
        )

    for k in range(plan.steering):
        at = start + plan.window_s * 0.9 * k / plan.steering
        while not stop.is_set():
            now = time.monotonic()
            if resend and resend[0][0] <= now:
                _, sid, mid, text = resend.pop(0)
                post(sid, mid, text)
                tally.steering_duplicates += 1
            elif now >= at and targets:
                break
            else:
                stop.wait(0.05)
        if stop.is_set():
            return
        session_id = rng.choice(targets)
        message_id = f"steer-{k:04d}-{rng.randrange(16**8):08x}"
        text = f"Steering {k}: also keep note {rng.randrange(1000)}."
        post(session_id, message_id, text)
        tally.steering_sent[message_id] = session_id
        if k % 3 == 0:
            resend.append((time.monotonic() + rng.uniform(0.1, 2.0), session_id, message_id, text))
            resend.sort()
    for _, sid, mid, text in resend:
        if stop.is_set():
            return
        post(sid, mid, text)
        tally.steering_duplicates += 1


def dispatch_stream(
    plan: Plan, dispatcher: Dispatcher, workspaces: list[Path], deliveries: Path,
    submitted: list[str], stop: threading.Event,
) -> None:  # fmt: skip
    """Submit the sessions at an even pace over the first 80% of the window.

    An idempotency key per session makes a retried submit (the broker or the
    database was down) find the session instead of creating a second one.
    """
    start = time.monotonic()
    for i, workspace in enumerate(workspaces):
        at = start + plan.window_s * 0.8 * i / plan.sessions
        if stop.wait(max(0.0, at - time.monotonic())):
            return
        spec = scripted_spec(
            script(i, deliveries),
            prompt=f"Survey the repository and deliver the note (session {i}).",
            tools=TOOLS,
            limits={"bash_timeout_s": 30},
        )
        submit = functools.partial(
            dispatcher.submit, spec, workspace=str(workspace), idempotency_key=f"chaos-{i}"
        )
        session, _ = retry(submit, what=f"submit session {i}")
        submitted.append(session.session_id)


# -- waiting --------------------------------------------------------------------------
def unfinished(dsn: str) -> tuple[int, int]:
    """``(sessions not done, inbox messages not acknowledged)``."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM sessions WHERE status <> 'done'),"
            " (SELECT count(*) FROM session_inbox WHERE status <> 'acknowledged')"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def describe_stuck(
    ledger: SqlLedger, dsn: str, leases: RedisLeaseStore, redis_url: str, prefix: str
) -> list[str]:
    """Sessions not done or with unacknowledged input: their rows, outbox and broker traces.

    The broker traces say where the session's ``run_session`` messages are now:
    in a queue list, in kombu's ``unacked`` hash, or nowhere (lost).
    """
    lines = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        outbox = conn.execute(
            "SELECT session_id, created_at, published_at, attempts FROM dispatch_outbox"
        ).fetchall()
    for session in ledger.sessions():
        sid = session.session_id
        open_msgs = [m for m in ledger.inbox(sid) if m.status is not InboxStatus.ACKNOWLEDGED]
        if session.status is SessionStatus.DONE and not open_msgs:
            continue
        lines.append(
            f"session {sid} status={session.status.value} epoch={session.lease_epoch} "
            f"lease={leases.holder(sid)} updated={session.updated_at:%H:%M:%S.%f} "
            f"inbox={[(m.message_id, m.status.value) for m in open_msgs]}"
        )
        for row in outbox:
            if row[0] == sid:
                lines.append(
                    f"  outbox created={row[1]:%H:%M:%S.%f} published={row[2]} tries={row[3]}"
                )
        traces = broker_traces(redis_url, prefix, sid)
        lines.append(f"  broker messages naming it: {', '.join(traces) or 'none (lost)'}")
        for run in ledger.runs_of(sid):
            events = ledger.events(run.run_id)
            lines.append(f"  run {run.run_id} terminal={run.terminal_state} events={len(events)}")
            for e in events[-5:]:
                lines.append(f"    #{e.sequence} {e.type.value} epoch={e.epoch} {_brief(e)}")
    return lines


def broker_traces(redis_url: str, prefix: str, session_id: str) -> list[str]:
    """Lists and hashes of the broker database that hold a message naming ``session_id``."""
    found = []
    client = redis.Redis.from_url(f"{redis_url}/{BROKER_DB}", socket_timeout=5)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            kind = client.type(key)
            values: list[Any] = []
            if kind == b"list":
                values = client.lrange(key, 0, -1)
            elif kind == b"hash":
                values = client.hvals(key)
            n = sum(1 for v in values if session_id.encode() in v)
            if n:
                found.append(f"{key.decode()}: {n}")
        bindings = client.smembers(f"{prefix}_kombu.binding.sessions")
        found.append(f"(binding of the sessions exchange present: {bool(bindings)})")
    finally:
        client.close()
    return found


def _brief(event: Event) -> str:
    p = event.payload
    keys = ("name", "status", "state", "reason", "kind", "text", "message_id")
    return " ".join(f"{k}={str(p[k])[:40]!r}" for k in keys if p.get(k) is not None)


# -- the checks -------------------------------------------------------------------------
@dataclass
class Findings:
    """Violations per check (empty = passed) and the counts the summary prints."""

    violations: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str) -> list[str]:
        """The violation list of check ``name`` (created empty)."""
        return self.violations.setdefault(name, [])


@dataclass
class LedgerDump:
    """Every session, run, event, receipt and inbox row, read once after the run."""

    sessions: list[Any]
    runs: dict[str, list[Any]]
    events: dict[str, list[Event]]
    receipts: dict[str, list[Any]]
    inbox: dict[str, list[Any]]

    @classmethod
    def read(cls, ledger: Ledger[Any]) -> LedgerDump:
        """Read the whole ledger through its read API (any adapter)."""
        sessions = ledger.sessions()
        runs = {s.session_id: ledger.runs_of(s.session_id) for s in sessions}
        run_ids = [r.run_id for rs in runs.values() for r in rs]
        return cls(
            sessions=sessions,
            runs=runs,
            events={r: ledger.events(r) for r in run_ids},
            receipts={r: ledger.receipts(r) for r in run_ids},
            inbox={s.session_id: ledger.inbox(s.session_id) for s in sessions},
        )


def check_terminals(dump: LedgerDump, out: Findings) -> None:
    """Check 1 -- every run ends in exactly one terminal state (DESIGN.md sections 2 and 6).

    Proves that no crash, pause or outage left a run open or sealed it twice:
    each run has exactly one ``terminal`` event, it is the run's last event, the
    run row carries the same state, and every session is ``done``.
    """
    bad = out.check("1 one terminal event per run")
    states: Counter[str] = Counter()
    for session in dump.sessions:
        if session.status is not SessionStatus.DONE:
            bad.append(f"session {session.session_id} is {session.status.value}")
        for run in dump.runs[session.session_id]:
            events = dump.events[run.run_id]
            terminals = [e for e in events if e.type is EventType.TERMINAL]
            if len(terminals) != 1:
                bad.append(f"run {run.run_id}: {len(terminals)} terminal events")
                continue
            if events[-1] is not terminals[0]:
                bad.append(f"run {run.run_id}: terminal #{terminals[0].sequence} is not last")
            state = terminals[0].payload.get("state")
            if run.terminal_state is None or run.terminal_state.value != state:
                bad.append(f"run {run.run_id}: row says {run.terminal_state}, event says {state}")
            states[f"{state}/{terminals[0].payload.get('reason')}"] += 1
    out.counts["sessions"] = len(dump.sessions)
    out.counts["runs"] = sum(len(r) for r in dump.runs.values())
    out.counts["terminal states"] = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))


def read_deliveries(path: Path) -> Counter[str]:
    """Executions of DeliverOnce per idempotency key (one line per real execution)."""
    lines = path.read_text("utf-8").splitlines() if path.exists() else []
    return Counter(line.split("\t", 1)[0] for line in lines if line)


def check_deliveries(dump: LedgerDump, executions: Counter[str], out: Findings) -> None:
    """Check 2 -- the deliver side effect happened at most once, and only when committed.

    DESIGN.md section 5 / issue 6 (a non-idempotent tool is never re-run by
    recovery) and section 3 steps 3 and 5 (a call runs only after its
    ``tool_call`` committed; an ``ok`` result is committed only after it ran):
    per idempotency key at most one execution; exactly one for every call
    whose committed result is ``ok`` (with the matching ``external_id`` on its
    receipt); none for a key whose call was never committed.
    """
    bad = out.check("2 deliver executions per key")
    results: dict[str, str] = {}  # committed call key -> committed result status ("none")
    for run_id, events in dump.events.items():
        receipts = {r.call_id: r for r in dump.receipts[run_id]}
        for e in events:
            if e.payload.get("name") != "DeliverOnce" or e.call_id is None:
                continue
            key = f"{run_id}:{e.call_id}"
            if e.type is EventType.TOOL_CALL:
                results.setdefault(key, "none")
            elif e.type is EventType.TOOL_RESULT:
                results[key] = str(e.payload.get("status"))
                receipt = receipts.get(e.call_id)
                want = "dlv-" + hashlib.sha256(key.encode()).hexdigest()[:16]
                got = receipt.evidence.get("external_id") if receipt else None
                if results[key] == ToolStatus.OK and got != want:
                    bad.append(f"{key}: ok result, receipt external_id {got!r} != {want!r}")
    for key, n in executions.items():
        if n > 1:
            bad.append(f"{key}: executed {n} times (duplicate side effect)")
        if key not in results:
            bad.append(f"{key}: executed but its tool_call was never committed")
    for key, status in results.items():
        if status == ToolStatus.OK and executions[key] != 1:
            bad.append(f"{key}: committed ok but executed {executions[key]} times")
    outcomes = Counter(f"{status}/{executions[key]}" for key, status in results.items())
    out.counts["deliver calls committed"] = len(results)
    out.counts["deliver executions"] = sum(executions.values())
    out.counts["deliver results ok"] = sum(1 for s in results.values() if s == ToolStatus.OK)
    out.counts["deliver duplicates"] = sum(1 for n in executions.values() if n > 1)
    out.counts["deliver calls by committed result/executions"] = ", ".join(
        f"{k} {v}" for k, v in sorted(outcomes.items())
    )


def check_steering(dump: LedgerDump, sent: dict[str, str], out: Findings) -> None:
    """Check 3 -- steering is acknowledged exactly once (DESIGN.md section 8).

    Every message id the harness posted (duplicates included) is one
    ``session_inbox`` row, ``acknowledged``, and exactly one ``user_input``
    event carries it across all runs of its session, in the run that claimed
    it: zero lost, zero doubled.
    """
    bad = out.check("3 steering acknowledged once")
    rows = {m.message_id: m for msgs in dump.inbox.values() for m in msgs}
    seen: dict[str, list[str]] = {}
    for session in dump.sessions:
        for run in dump.runs[session.session_id]:
            for e in dump.events[run.run_id]:
                mid = e.payload.get("message_id") if e.type is EventType.USER_INPUT else None
                if mid is not None:
                    seen.setdefault(mid, []).append(run.run_id)
    for mid, session_id in sent.items():
        row = rows.get(mid)
        if row is None:
            bad.append(f"{mid}: no inbox row (lost)")
            continue
        if row.session_id != session_id:
            bad.append(f"{mid}: stored for {row.session_id}, sent to {session_id}")
        if row.status is not InboxStatus.ACKNOWLEDGED:
            bad.append(f"{mid}: status {row.status.value}")
        runs = seen.get(mid, [])
        if len(runs) != 1:
            bad.append(f"{mid}: {len(runs)} user_input events")
        elif runs[0] != row.claimed_run_id:
            bad.append(f"{mid}: seen in run {runs[0]}, claimed by {row.claimed_run_id}")
    for mid in set(seen) - set(sent):
        bad.append(f"{mid}: user_input for a message the harness never sent")
    out.counts["steering acknowledged"] = sum(
        1 for mid in sent if mid in rows and rows[mid].status is InboxStatus.ACKNOWLEDGED
    )


def check_epochs(dump: LedgerDump, out: Findings) -> None:
    """Check 4 -- no row was written with a stale fencing epoch (DESIGN.md section 4).

    A writer that lost its lease cannot write: within a run the epochs of
    events never go down in sequence order (an old owner writing after the new
    one would show as a drop), every receipt has the epoch of its
    ``tool_result`` event (committed together by one owner), and no row's
    epoch is above its session's ``lease_epoch``.
    """
    bad = out.check("4 zero stale-epoch rows")
    epochs: Counter[int] = Counter()
    for session in dump.sessions:
        top = session.lease_epoch
        for run in dump.runs[session.session_id]:
            events = dump.events[run.run_id]
            results = {e.call_id: e for e in events if e.type is EventType.TOOL_RESULT}
            for before, after in itertools.pairwise(events):
                if after.epoch < before.epoch:
                    bad.append(
                        f"run {run.run_id}: #{after.sequence} epoch {after.epoch} after "
                        f"#{before.sequence} epoch {before.epoch}"
                    )
            for e in events:
                epochs[e.epoch] += 1
                if e.epoch > top:
                    bad.append(f"run {run.run_id}: #{e.sequence} epoch {e.epoch} > {top}")
            for r in dump.receipts[run.run_id]:
                result = results.get(r.call_id)
                if result is None:
                    bad.append(f"run {run.run_id}: receipt {r.call_id} has no tool_result")
                elif r.epoch != result.epoch:
                    bad.append(
                        f"run {run.run_id}: receipt {r.call_id} epoch {r.epoch}, "
                        f"its result epoch {result.epoch}"
                    )
                if r.epoch > top:
                    bad.append(f"run {run.run_id}: receipt {r.call_id} epoch {r.epoch} > {top}")
    out.counts["max lease epoch"] = max((s.lease_epoch for s in dump.sessions), default=0)
    out.counts["runs continued by a later owner (>1 epoch)"] = sum(
        1 for events in dump.events.values() if len({e.epoch for e in events if e.epoch}) > 1
    )


def check_transcripts(dump: LedgerDump, out: Findings) -> None:
    """Check 5 -- every run's transcript is a request both APIs accept (DESIGN.md section 3.1).

    ``core.transcript.project`` over the run's committed events, converted
    with ``openai_messages`` and ``anthropic_messages``, passes the pairing
    validators: every call answered once, in order, whatever the crashes left.
    """
    bad = out.check("5 transcripts pass the pairing validators")
    statuses: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for events in dump.events.values():
        for e in events:
            if e.type is EventType.TOOL_RESULT:
                status = str(e.payload.get("status"))
                kind = status if status == "ok" else f"{e.payload.get('name')}/{status}"
                statuses[kind] += 1
                if status not in ("ok", "interrupted"):
                    examples.setdefault(kind, str(e.payload.get("content", ""))[:90])
    out.counts["tool results by status"] = ", ".join(
        f"{k} {v}" for k, v in sorted(statuses.items())
    )
    for kind, text in sorted(examples.items()):
        out.counts[f"  e.g. {kind}"] = text
    for run_id, events in dump.events.items():
        request = ProviderRequest(run_id=run_id, turn_index=0, messages=tuple(project(events)))
        try:
            validate_openai_messages(openai_messages(request))
            validate_anthropic_messages(anthropic_messages(request))
        except ValueError as exc:
            bad.append(f"run {run_id}: {exc}")


# -- reporting --------------------------------------------------------------------------
def log_counts(workers: list[Worker]) -> dict[str, int]:
    """Evidence in the worker logs that fencing and recovery were exercised."""
    text = "".join(w.text() for w in workers)
    return {
        "worker log: lease_lost (owner stopped, fenced out)": text.count("lease_lost"),
        "worker log: lease held (duplicate delivery exited)": text.count("lease held"),
        "worker log: recovery (orphan calls settled)": text.count(": recovery {"),
        "worker log: write refused by the ledger's epoch check": text.count("is stale (current"),
        "worker log: commit retried through a ledger outage": text.count(
            "commit: ledger unavailable"
        ),
        "worker log: cut-off commit found landed (not repeated)": text.count("had landed"),
    }


def summary(plan: Plan, tally: Tally, found: Findings, extra: dict[str, Any]) -> Table:
    """The compact table: each check's verdict, then the counts."""
    table = Table(title=f"chaos run: {plan.sessions} sessions, {plan.workers} session workers")
    table.add_column("item")
    table.add_column("value", overflow="fold")
    for name, bad in found.violations.items():
        verdict = "PASS" if not bad else f"FAIL ({len(bad)}): " + "; ".join(bad[:3])
        table.add_row(f"check {name}", verdict)
    for kind in KILL_KINDS:
        table.add_row(f"chaos: {kind}", str(tally.kills[kind]))
    table.add_row("steering messages sent", str(len(tally.steering_sent)))
    table.add_row("steering duplicates sent (same id)", str(tally.steering_duplicates))
    for key, value in {**found.counts, **extra}.items():
        table.add_row(key, str(value))
    return table


# -- main -------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (sizes default from --sessions)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--workers", type=int, default=3, help="session worker processes")
    p.add_argument("--concurrency", type=int, default=4, help="threads per session worker")
    p.add_argument("--window", type=float, default=0.0, help="chaos window, s (default from N)")
    p.add_argument("--sigkills", type=int, default=None, help="session-worker SIGKILLs")
    p.add_argument("--sigstops", type=int, default=None, help="session-worker SIGSTOPs")
    p.add_argument("--steering", type=int, default=None, help="steering messages")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--timeout", type=float, default=0.0, help="s to wait for the end")
    p.add_argument("--logs", type=Path, default=None, help="copy worker and Redis logs here")
    args = p.parse_args(argv)
    if args.sessions < 1 or args.workers < 2:
        p.error("--sessions must be >= 1 and --workers >= 2 (one is killed at a time)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = plan_for(args)
    if shutil.which("redis-server") is None:
        console.print("redis-server is not on PATH")
        return 2
    started = time.monotonic()
    say(
        f"plan: {plan.sessions} sessions, {plan.workers} session workers x {plan.concurrency} "
        f"threads + 1 tool worker; window {plan.window_s:.0f}s; events {Counter(plan.events)}; "
        f"{plan.steering} steering messages; seed {plan.seed}"
    )
    with (
        scratch_database("nahida_chaos") as (url, dsn),
        tempfile.TemporaryDirectory(prefix="nahida-chaos-") as tmp,
    ):
        root = Path(tmp)
        (root / "logs").mkdir()
        # The sweeper's and the runtime's own warnings go to a file, not the console.
        logging.basicConfig(
            filename=root / "logs" / "harness.log",
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s",
            force=True,
        )
        db_name = url.rsplit("/", 1)[1]
        engine = make_engine(url)
        upgrade(engine)
        ledger = SqlLedger(engine=engine)
        server = RedisServer(root)
        server.start()
        fleet = Fleet(
            postgres_url=url,
            redis_url=server.url,
            workdir=root / "logs",
            lease_ttl_s=LEASE_TTL_S,
            visibility_timeout_s=VISIBILITY_TIMEOUT_S,
        )
        tally = Tally()
        chaos = Chaos(plan, fleet, server, db_name, tally)
        stop = threading.Event()
        threads: list[threading.Thread] = []
        try:
            code = run(plan, fleet, server, ledger, dsn, root, chaos, tally, stop, threads)
        finally:
            stop.set()
            chaos.stop.set()
            for thread in threads:
                thread.join(timeout=30)
            chaos.pool.shutdown(wait=True)
            fleet.stop()
            server.stop()
            engine.dispose()
            if args.logs is not None:
                shutil.copytree(root / "logs", args.logs, dirs_exist_ok=True)
                shutil.copy(root / "redis.log", args.logs / "redis.log")
            # The log file goes with the temporary directory: later records go
            # to stderr.
            logging.basicConfig(level=logging.WARNING, force=True)
    console.print(f"wall time: {time.monotonic() - started:.1f} s")
    return code


def run(
    plan: Plan, fleet: Fleet, server: RedisServer, ledger: SqlLedger, dsn: str, root: Path,
    chaos: Chaos, tally: Tally, stop: threading.Event, threads: list[threading.Thread],
) -> int:  # fmt: skip
    """Start, run the chaos, wait for the end, stop the workers, then :func:`report`."""
    deliveries = root / "deliveries.log"
    with ThreadPoolExecutor(max_workers=8) as pool:
        workspaces = list(
            pool.map(lambda i: make_repo(root / "ws" / f"s{i:04d}"), range(plan.sessions))
        )
    for _ in range(plan.workers):
        chaos.start_session_worker()
    chaos.start_tool_worker()
    chaos.wait_started()
    dispatcher = fleet.dispatcher(ledger)
    leases = RedisLeaseStore.from_url(f"{server.url}/{LEASE_DB}", key_prefix=fleet.prefix)
    info = redis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
    clock = SystemClock()

    def broker_reset() -> bool:
        # tasks.maintenance.broker_reset, on the chaos Redis.
        run_id = str(info.info("server")["run_id"])
        return ledger.swap_fleet_value(BROKER_RUN_ID_KEY, run_id, at=clock.now()) != run_id

    broker_reset()  # the first sweep must not see a "reset" of the Redis we just started
    sweeper = Sweeper(
        ledger, leases, dispatcher, clock, redispatch_after_s=REDISPATCH_AFTER_S,
        redispatch_queued_after_s=REDISPATCH_QUEUED_AFTER_S, broker_reset=broker_reset,
        runner=None,
    )  # fmt: skip
    inbox = Inbox(ledger, leases, dispatcher, clock)
    submitted: list[str] = []
    say(f"{len(chaos.session_workers)} session workers and a tool worker ready; dispatching")
    tally.t0 = time.monotonic()
    for target, targs in (
        (sweeper_loop, (sweeper, tally, stop)),
        (dispatch_stream, (plan, dispatcher, workspaces, deliveries, submitted, stop)),
        (chaos.run_schedule, ()),
        (steering_loop, (plan, inbox, submitted, tally, stop)),
    ):
        thread = threading.Thread(
            target=guarded(target, tally), args=targs, name=target.__name__, daemon=True
        )
        thread.start()
        threads.append(thread)
    for thread in threads[1:]:  # dispatch, chaos schedule, steering: all finite
        while thread.is_alive():
            chaos.watchdog()
            thread.join(timeout=0.5)
    say("dispatch, chaos schedule and steering finished; waiting for the fleet to drain")
    deadline = time.monotonic() + plan.timeout_s
    left = (-1, -1)
    while time.monotonic() < deadline:
        chaos.watchdog()
        try:
            left = unfinished(dsn)
        except psycopg.Error:
            left = (-1, -1)
        if left == (0, 0) and len(submitted) == plan.sessions:
            break
        time.sleep(0.5)  # polling interval of the observable state above
    drained = left == (0, 0)
    say(f"drained: {drained}; stopping the sweeper and the workers")
    stop.set()
    chaos.stop.set()
    threads[0].join(timeout=30)
    chaos.wait_started()
    if not drained:
        console.print(f"TIMEOUT after {plan.timeout_s:.0f}s: {left[0]} sessions not done, "
                      f"{left[1]} inbox messages not acknowledged", markup=False)  # fmt: skip
        stuck = retry(
            lambda: describe_stuck(ledger, dsn, leases, server.url, fleet.prefix), what="describe"
        )
        for line in stuck[:200]:
            console.print(line, markup=False)
    workers = list(fleet.workers)
    fleet.stop()
    return report(plan, ledger, tally, deliveries, workers, drained=drained)


def report(
    plan: Plan, ledger: SqlLedger, tally: Tally, deliveries: Path, workers: list[Worker],
    *, drained: bool,
) -> int:  # fmt: skip
    """Run the five checks on the quiet ledger, print the summary; the exit code."""
    dump = retry(lambda: LedgerDump.read(ledger), what="read the ledger")
    found = Findings()
    check_terminals(dump, found)
    check_deliveries(dump, read_deliveries(deliveries), found)
    check_steering(dump, tally.steering_sent, found)
    check_epochs(dump, found)
    check_transcripts(dump, found)
    extra: dict[str, Any] = {
        "pg backends terminated": tally.pg_backends_terminated,
        "sweeps (errors)": f"{tally.sweeps} ({dict(tally.sweep_errors) or 'none'})",
        "sweeper re-dispatches (broker resets)": f"{tally.redispatched} ({tally.broker_resets})",
        "workers that exited by themselves (replaced)": len(tally.unexpected_exits),
        "harness errors": len(tally.harness_errors),
        **log_counts(workers),
    }
    console.print(summary(plan, tally, found, extra))
    console.print("chaos timeline:", markup=False)
    for line in tally.timeline:
        console.print(f"  {line}", markup=False)
    for line in tally.unexpected_exits:
        console.print(f"WARNING unexpected worker exit: {line}", markup=False)
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
    ok = drained and not failed and not missing and not tally.harness_errors
    result = {
        "drained": drained,
        "violations": {k: len(v) for k, v in found.violations.items()},
        "kills": {k: tally.kills[k] for k in KILL_KINDS},
        "steering": [len(tally.steering_sent), tally.steering_duplicates],
        "counts": {k: v for k, v in found.counts.items() if isinstance(v, int)},
        "unexpected_exits": len(tally.unexpected_exits),
        "harness_errors": len(tally.harness_errors),
    }
    console.print(
        f"chaos result: {json.dumps(result, sort_keys=True)}", markup=False, soft_wrap=True
    )
    console.print(f"chaos verdict: {'PASS' if ok else 'FAIL'}", markup=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
