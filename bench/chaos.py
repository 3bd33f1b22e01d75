"""Chaos run of the real fleet: crashes, pauses and outages lose nothing and repeat nothing.

N sessions of a scripted plan run on K ``celery -A tasks
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
``DeliverOnce`` (``nahida_workers.testing.tools``: deliver-kind, not
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
   (section 3 step 1);
6. every hostile session (one in ten meets a FIFO, a catastrophic regex, NUL
   bytes and a 300-character call id: ``chaos_hostile``) ends within its
   budget;
7. no call of any other session timed out;
8-11. one session in ten is a parent with 2-3 foreground children
   (``chaos_children``): at most one child per (parent run, call), no parent
   left ``waiting`` after its children ended, one result adopted per Task
   call, every child of a completed parent terminal (section 8).

A worker that exits by itself is a failure of the run (it is not replaced).

With ``--mixed`` the same fleet also runs a batch backlog (a big batch at
priority 0 capped at half the slots, then a small one at priority 9), a
schedule every 3 s decided by a real ``celery beat``, cancels of parents, of
children and of queued backlog sessions through ``Inbox.cancel``, and a
rolling SIGTERM restart of every session worker (``chaos_mixed``), and checks
12-15 (``chaos_control``): every cancelled session sealed ``cancelled``,
every parent of a cancelled subtree terminal, no fire ``missed``, every
SIGTERMed worker handed over and exited 0; it reports the fire decision lag,
the cancel-to-sealed latency and the small batch's queue wait.

    python -m bench.chaos --sessions 200 --workers 3    # exits 1 on any violation
    python -m bench.chaos --sessions 200 --workers 3 --mixed

Its parts: ``chaos_rig`` (timings, the plan, a private Redis, the tally),
``chaos_faults`` (the kills and outages), ``chaos_checks`` (checks 1-5),
``chaos_hostile`` (the hostile-input fault, checks 6-7), ``chaos_children``
(parents with children, checks 8-11),
``chaos_mixed`` and ``chaos_control`` (the mixed workload, checks 12-15),
``chaos_diagnose`` (what a run that did not drain left behind) and
``chaos_report`` (the checks' run, the summary and the verdict).
"""

from __future__ import annotations

import argparse
import functools
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.chaos_children import is_parent, parent_spec
from bench.chaos_diagnose import describe_stuck, unfinished
from bench.chaos_faults import Chaos
from bench.chaos_hostile import (
    HOSTILE_BUDGET_S,
    HOSTILE_TOOLS,
    hostile_script,
    is_hostile,
    prepare_hostile_workspace,
)
from bench.chaos_mixed import (
    Mixed,
    MixedPlan,
    beat_env,
    describe,
    is_cancel_target,
    mixed_plan,
)
from bench.chaos_report import report
from bench.chaos_rig import (
    LEASE_TTL_S,
    REDISPATCH_AFTER_S,
    REDISPATCH_QUEUED_AFTER_S,
    SPARE_ANSWERS,
    SWEEP_EVERY_S,
    TOOLS,
    VISIBILITY_TIMEOUT_S,
    Plan,
    RedisServer,
    Tally,
    console,
    retry,
    say,
)
from bench.common import scratch_database
from nahida_workers.celery.maintenance import run_id_changed
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import LEASE_DB, Fleet, make_repo


# -- the plan -------------------------------------------------------------------------
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
        pool=args.pool,
        sigterms=args.workers if args.mixed else 0,  # a rolling restart of every worker
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


def hostile_spec(i: int, deliveries: Path) -> Any:
    """The spec of hostile session ``i`` (``bench/chaos_hostile.py``)."""
    return scripted_spec(
        hostile_script(i, deliveries),
        prompt=f"Survey the repository, odd files and all (session {i}).",
        tools=HOSTILE_TOOLS,
        placement={"Grep": "local" if i % 2 else "remote"},
        limits={"bash_timeout_s": 30, "wall_clock_budget_s": HOSTILE_BUDGET_S},
    )


def dispatch_stream(
    plan: Plan, dispatcher: Dispatcher, workspaces: list[Path], deliveries: Path,
    submitted: list[str], steer: list[str], stop: threading.Event, *, mixed: bool = False,
) -> None:  # fmt: skip
    """Submit the sessions at an even pace over the first 80% of the window.

    An idempotency key per session makes a retried submit (the broker or the
    database was down) find the session instead of creating a second one.
    Every session id goes to ``submitted`` (index i: session i), and to
    ``steer`` unless a mixed run may cancel it (a cancel target is not steered).
    """
    start = time.monotonic()
    for i, workspace in enumerate(workspaces):
        at = start + plan.window_s * 0.8 * i / plan.sessions
        if stop.wait(max(0.0, at - time.monotonic())):
            return
        spec = (
            hostile_spec(i, deliveries)
            if is_hostile(i)
            else parent_spec(i)
            if is_parent(i)
            else scripted_spec(
                script(i, deliveries),
                prompt=f"Survey the repository and deliver the note (session {i}).",
                tools=TOOLS,
                limits={"bash_timeout_s": 30},
            )
        )
        submit = functools.partial(
            dispatcher.submit, spec, workspace=str(workspace), idempotency_key=f"chaos-{i}"
        )
        session, _ = retry(submit, what=f"submit session {i}")
        submitted.append(session.session_id)
        if not (mixed and is_cancel_target(i)):
            steer.append(session.session_id)


# -- main -------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (sizes default from --sessions)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--workers", type=int, default=3, help="session worker processes")
    p.add_argument("--concurrency", type=int, default=4, help="threads per session worker")
    p.add_argument(
        "--pool",
        choices=("threads", "prefork"),
        default="threads",
        help="session workers' Celery pool; prefork: kills and pauses hit the pool child "
        "that owns the sessions",
    )
    p.add_argument("--window", type=float, default=0.0, help="chaos window, s (default from N)")
    p.add_argument("--sigkills", type=int, default=None, help="session-worker SIGKILLs")
    p.add_argument("--sigstops", type=int, default=None, help="session-worker SIGSTOPs")
    p.add_argument("--steering", type=int, default=None, help="steering messages")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--timeout", type=float, default=0.0, help="s to wait for the end")
    p.add_argument("--logs", type=Path, default=None, help="copy worker and Redis logs here")
    p.add_argument(
        "--mixed",
        action="store_true",
        help="also a batch backlog, a small urgent batch, a schedule decided by celery beat, "
        "cancels of parents and children, and a rolling SIGTERM restart (checks 12-15)",
    )
    p.add_argument(
        "--backlog", type=int, default=None, help="--mixed: backlog sessions (default 2N, >= 40)"
    )
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
        f"{'processes' if plan.pool == 'prefork' else 'threads'} + 1 tool worker; "
        f"window {plan.window_s:.0f}s; events {Counter(plan.events)}; "
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
        if args.mixed:
            say(describe(mixed_plan(plan, backlog=args.backlog)))
            fleet.extra_env.update(beat_env(REDISPATCH_AFTER_S, REDISPATCH_QUEUED_AFTER_S))
        tally = Tally()
        chaos = Chaos(plan, fleet, server, db_name, tally)
        stop = threading.Event()
        threads: list[threading.Thread] = []
        try:
            sizes = mixed_plan(plan, backlog=args.backlog) if args.mixed else None
            code = run(
                plan, fleet, server, ledger, dsn, root, chaos, tally, stop, threads, sizes=sizes
            )
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
    *, sizes: MixedPlan | None = None,
) -> int:  # fmt: skip
    """Start, run the chaos, wait for the end, stop the workers, then :func:`report`.

    ``sizes``: a mixed run's workload (``chaos_mixed``), None for the plan alone.
    """
    deliveries = root / "deliveries.log"
    with ThreadPoolExecutor(max_workers=8) as pool:
        workspaces = list(
            pool.map(lambda i: make_repo(root / "ws" / f"s{i:04d}"), range(plan.sessions))
        )
    for i, workspace in enumerate(workspaces):
        if is_hostile(i):
            prepare_hostile_workspace(workspace)
    for _ in range(plan.workers):
        chaos.start_session_worker()
    chaos.start_tool_worker()
    chaos.wait_started()
    if sizes is not None:
        chaos.start_beat()
    dispatcher = fleet.dispatcher(ledger)
    leases = RedisLeaseStore.from_url(f"{server.url}/{LEASE_DB}", key_prefix=fleet.prefix)
    info = redis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
    clock = SystemClock()

    def broker_reset() -> bool:
        # nahida_workers.celery.maintenance.broker_reset, on the chaos Redis.
        return run_id_changed(ledger, str(info.info("server")["run_id"]), at=clock.now())

    sweeper = Sweeper(
        ledger, leases, dispatcher, clock, redispatch_after_s=REDISPATCH_AFTER_S,
        redispatch_queued_after_s=REDISPATCH_QUEUED_AFTER_S, broker_reset=broker_reset,
        runner=None,
    )  # fmt: skip
    inbox = Inbox(ledger, leases, dispatcher, clock)
    submitted: list[str] = []
    steer: list[str] = []
    say(f"{len(chaos.session_workers)} session workers and a tool worker ready; dispatching")
    tally.t0 = time.monotonic()
    work: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
        (sweeper_loop, (sweeper, tally, stop)),
        (
            functools.partial(dispatch_stream, mixed=sizes is not None),
            (plan, dispatcher, workspaces, deliveries, submitted, steer, stop),
        ),
        (chaos.run_schedule, ()),
        (steering_loop, (plan, inbox, steer, tally, stop)),
    ]
    mixed = None
    if sizes is not None:
        repo = make_repo(root / "ws" / "mixed")
        store = SqlScheduleStore(ledger.engine)
        mixed = Mixed(plan, sizes, dispatcher, inbox, store, dsn, repo)
        mixed.start_schedule()
        work += [
            (mixed.submit_backlog, ()),
            (mixed.submit_small, (stop,)),
            (mixed.cancel_loop, (submitted, stop)),
        ]
    for target, targs in work:
        name = getattr(target, "__name__", None) or target.func.__name__  # type: ignore[attr-defined]
        thread = threading.Thread(target=guarded(target, tally), args=targs, name=name, daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads[1:]:  # dispatch, chaos schedule, steering, mixed work: all finite
        while thread.is_alive():
            chaos.watchdog()
            thread.join(timeout=0.5)
    chaos.wait_exits()
    if mixed is not None:
        mixed.stop_schedule()  # no more fires: the fleet can drain
    say("dispatch, chaos schedule and steering finished; waiting for the fleet to drain")
    deadline = time.monotonic() + plan.timeout_s
    left = (-1, -1)
    while time.monotonic() < deadline:
        chaos.watchdog()
        try:
            left = unfinished(dsn)
        except psycopg.Error:
            left = (-1, -1)
        settled = mixed is None or not mixed.fires_open()
        if left == (0, 0) and len(submitted) == plan.sessions and settled:
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
    return report(plan, ledger, tally, deliveries, workers, drained=drained, mixed=mixed)


if __name__ == "__main__":
    sys.exit(main())
