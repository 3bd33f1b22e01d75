"""The chaos harness's rig: timings, progress lines, the plan, a private Redis, the tally.

Shared by :mod:`bench.chaos` (the run) and its parts (:mod:`bench.chaos_faults`,
:mod:`bench.chaos_checks`, :mod:`bench.chaos_diagnose`).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import redis
from rich.console import Console

T = TypeVar("T")
DELIVER = "DeliverOnce"  # registered by the test fleet (NAHIDA_EXTRA_TOOLS)
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
#: The rolling-restart fault of a mixed run (``--mixed``): a deploy's SIGTERM.
SIGTERM_KIND = "sigterm session worker"
#: Seconds a SIGTERMed session worker may take to hand its sessions over and exit
#: (its running steps are short Bash commands; past this it is a failure of the run).
SIGTERM_GRACE_S = 60.0

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
    pool: str = "threads"  # Celery --pool of the session workers (threads or prefork)
    sigterms: int = 0  # rolling SIGTERM restarts (``--mixed``: one per session worker)

    @property
    def events(self) -> list[str]:
        """The chaos events, one entry per event (order chosen by the seed)."""
        return (
            ["sigkill session worker"] * self.sigkills
            + ["sigstop session worker"] * self.sigstops
            + [SIGTERM_KIND] * self.sigterms
            + ["sigkill tool worker", "redis restart", "pg terminate backends"]
        )

    @property
    def kinds(self) -> list[str]:
        """The kinds of chaos event this run reports: the five faults, then the rest it plans."""
        return [*KILL_KINDS, *sorted(set(self.events) - set(KILL_KINDS))]


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
    #: Each SIGTERMed session worker: (name, exit code or None if it had to be killed, seconds).
    sigterm_exits: list[tuple[str, int | None, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float = field(default_factory=time.monotonic)

    def note(self, kind: str, detail: str) -> None:
        """Count a chaos event of ``kind`` and put it on the timeline."""
        with self.lock:
            self.kills[kind] += 1
            at = f"t+{time.monotonic() - self.t0:5.1f}s ({clock_ms()})"
            self.timeline.append(f"{at} {kind}: {detail}")
        say(f"chaos: {kind}: {detail}")
