"""Real worker processes for integration tests, chaos runs and benchmarks.

A :class:`Fleet` owns the environment of one test: the per-run PostgreSQL
database, Redis databases 11-13 (broker, results, leases) shared safely
through a unique key prefix for leases and broker queues, and the
``celery -A tasks worker`` processes it starts.  Tests kill those processes
with real signals (SIGKILL, SIGSTOP).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.settings import Settings
from nahida_workers.testing.tools import TEST_TOOL_PATHS

ROOT = Path(__file__).resolve().parents[2]
BROKER_DB, RESULTS_DB, LEASE_DB = 11, 12, 13
#: What beat logs when it runs a control job (``celery/beat.py``).
BEAT_READY = "Running due control job"


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, what: str, every: float = 0.05
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


@dataclass
class Worker:
    """One ``celery worker`` process and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        """Everything the worker logged so far."""
        return self.log.read_text("utf-8", errors="replace") if self.log.exists() else ""

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to the worker process."""
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """Terminate (and reap) the worker."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@dataclass
class Fleet:
    """Environment and processes of one distributed test."""

    postgres_url: str
    redis_url: str
    workdir: Path
    lease_ttl_s: float = 2.0
    visibility_timeout_s: float = 6.0
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    prefix: str = field(default_factory=lambda: f"it:{uuid.uuid4().hex[:8]}:")
    _apps: list[Any] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """Environment of a worker process: only what the test sets."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NAHIDA_", "CELERY"))}
        env.update(
            {
                "NAHIDA_DATABASE_URL": self.postgres_url,
                "NAHIDA_BROKER_URL": f"{self.redis_url}/{BROKER_DB}",
                "NAHIDA_RESULT_BACKEND_URL": f"{self.redis_url}/{RESULTS_DB}",
                "NAHIDA_REDIS_URL": f"{self.redis_url}/{LEASE_DB}",
                "NAHIDA_REDIS_KEY_PREFIX": self.prefix,
                "NAHIDA_BROKER_KEY_PREFIX": self.prefix,
                "NAHIDA_LEASE_TTL_S": str(self.lease_ttl_s),
                "NAHIDA_VISIBILITY_TIMEOUT_S": str(self.visibility_timeout_s),
                "NAHIDA_ENV_FILE": "/dev/null",
                "NAHIDA_EXTRA_TOOLS": json.dumps(list(TEST_TOOL_PATHS)),
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
            }
        )
        return env

    def settings(self) -> Settings:
        """The same settings, as an object for the test process."""
        fields: dict[str, Any] = {
            k[len("NAHIDA_") :].lower(): json.loads(v) if v.startswith("[") else v
            for k, v in self.env().items()
            if k.startswith("NAHIDA_") and k != "NAHIDA_ENV_FILE"
        }
        return Settings.model_validate(fields)

    def start_worker(
        self,
        *,
        queues: str = "sessions",
        concurrency: int = 2,
        name: str | None = None,
        pool: str = "threads",
    ) -> Worker:
        """Start ``celery -A tasks worker`` and wait until it is ready.

        ``pool`` is Celery's ``--pool``: ``threads`` (one process) or
        ``prefork`` (a parent and ``concurrency`` child processes).
        """
        name = name or f"w{len(self.workers) + 1}-{uuid.uuid4().hex[:4]}"
        args = ["worker", "-Q", queues, "--pool", pool, "-c", str(concurrency), "-n", f"{name}@%h"]
        args += ["--without-heartbeat", "--without-mingle", "--without-gossip"]
        return self._start(name, args, ready=" ready.", mode="wb", what="start")

    def start_beat(self, *, name: str | None = None) -> Worker:
        """Start ``celery -A tasks beat`` and wait until it runs its first control job.

        Any number of beats may run against one broker, with no schedule
        file: each runs the schedule tick itself, and the ledger decides
        every fire once (DESIGN.md section 8; ``celery/beat.py``).
        """
        name = name or f"beat{len(self.workers) + 1}-{uuid.uuid4().hex[:4]}"
        args = ["beat", "--max-interval", "1"]
        return self._start(name, args, ready=BEAT_READY, what="run its first control job")

    def _start(
        self, name: str, args: list[str], *, ready: str, what: str, mode: str = "ab"
    ) -> Worker:
        """Run ``celery -A tasks ARGS -l INFO`` logging to ``NAME.log``; wait for ``ready``."""
        log = self.workdir / f"{name}.log"
        handle = log.open(mode)
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", *args, "-l", "INFO"],
            cwd=ROOT,
            env=self.env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        wait_for(
            lambda: ready in worker.text() or proc.poll() is not None,
            timeout=30,
            what=f"{name} to {what}",
        )
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited at start:\n{worker.text()[-3000:]}")
        return worker

    def dispatcher(self, ledger: SqlLedger) -> Dispatcher:
        """A dispatcher publishing through the real broker, with this fleet's prefix.

        A fresh Celery app per fleet: kombu caches connections and producers
        per app, and each fleet has its own broker key prefix.
        """
        from celery import Celery

        from nahida_workers.celery.app import CeleryTaskQueue
        from nahida_workers.celery.config import celery_config
        from nahida_workers.ports import SystemClock

        publisher = Celery("nahida-test-publisher", set_as_current=False)
        publisher.conf.update(celery_config(self.settings()))
        self._apps.append(publisher)
        return Dispatcher(ledger, CeleryTaskQueue(publisher), SystemClock())

    def purge_broker(self) -> int:
        """Delete this fleet's broker keys (its queues); returns how many.

        Only keys under this fleet's own prefix: a test that leaves a
        backlog behind does not leave it in the shared Redis.
        """
        import redis

        client = redis.Redis.from_url(f"{self.redis_url}/{BROKER_DB}")
        try:
            keys = list(client.scan_iter(match=f"{self.prefix}*", count=1000))
            return int(client.delete(*keys)) if keys else 0
        finally:
            client.close()

    def stop(self) -> None:
        """Stop every worker this fleet started."""
        for worker in self.workers:
            worker.stop()
        for publisher in self._apps:
            publisher.close()


def marked_processes(marker: str) -> list[int]:
    """PIDs of live processes whose command line holds ``marker`` (zombies have none).

    Tests start their shell commands with a unique marker in the command
    line, so this finds them wherever they were reparented.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def submit(dispatcher: Dispatcher, spec: SessionSpec, workspace: Path) -> str:
    """Dispatch one session and return its id."""
    session, _ = dispatcher.submit(spec, workspace=str(workspace))
    return session.session_id


def wait_done(ledger: SqlLedger, session_id: str, *, timeout: float = 60) -> None:
    """Wait until a session's status is ``done``."""
    wait_for(
        lambda: (
            (s := ledger.get_session(session_id)) is not None and s.status is SessionStatus.DONE
        ),
        timeout=timeout,
        what=f"session {session_id} to finish",
    )


def terminal_events(ledger: SqlLedger, run_id: str) -> list[Any]:
    """The terminal events of a run (there must be exactly one)."""
    return [e for e in ledger.events(run_id) if e.type is EventType.TERMINAL]


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A small git repository with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {"README.md": "# Demo\n", "src/app.py": "# TODO: x\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], cwd=path, check=True)
    return path
