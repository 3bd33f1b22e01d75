"""The control plane under load: decisions on time while the fleet is busy (DESIGN.md section 1).

One run, one real beat and one real session worker (``--slots`` slots) on a
scratch PostgreSQL database and the real Redis.  Three control facts are
measured twice -- on an idle fleet, then behind a backlog of ``--backlog``
queued sessions -- and the ratio printed:

* **fire decision lag**: a schedule fires every ``--every`` seconds; the lag
  is the time from a fire's due time to its decision in the ledger
  (``schedule_fires.decided_at - due_at``);
* **small batch queue wait**: ``--small`` sessions at priority 9 submitted
  while the slots are busy; the wait is submission to the first provider
  turn committed (the slowest of the batch);
* **cancel-to-sealed**: ``--cancels`` queued sessions cancelled through the
  public cancel path (``Inbox.cancel``, what ``nahida cancel`` and the API
  call) while every slot is busy; the latency is the call to the session's
  ``done`` in the ledger.  A queued session is sealed by the canceller's own
  transaction (``runtime/control/cancel.py``), so this is tens of
  milliseconds whether or not a slot is free (it used to wait for one: ~4 s
  idle).  A session not sealed within ``--cancel-timeout`` counts as that
  many seconds and is reported as such.

In the idle phase the slots are free for the fires and the small batch;
before its cancels, slow sessions take every slot (a queued session is what
is cancelled), as the backlog does in the second phase.
Nothing is asserted about wall time; the run exits 1 only when a fire was
recorded ``missed`` or the backlog drained before the measurements ended.

    python -m bench.control               # backlog 5,000, 2 slots
    python -m bench.control --quick       # CI smoke: backlog 500
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.common import scratch_database
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.wiring import Fleet as Runtime
from nahida_workers.runtime.wiring import build_fleet
from nahida_workers.schedules.model import FireOutcome, FireRecord, Overlap, ScheduleDef
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing.backlog import backlog, decision_lags_s, percentile, scripted_job
from nahida_workers.testing.fleet import Fleet, make_repo, wait_for


@dataclass
class Phase:
    """What one phase measured, in seconds."""

    name: str
    lags: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    cancels: list[float] = field(default_factory=list)
    unsealed: int = 0
    missed: int = 0
    #: Backlog sessions still queued when the fires and the small batch were measured.
    left: int | None = None


def _runtime(fleet: Fleet) -> Runtime:
    """The public dispatch and cancel path (``build_fleet``) on the fleet's broker."""
    from celery import Celery

    from nahida_workers.celery.app import CeleryTaskQueue
    from nahida_workers.celery.config import celery_config

    publisher = Celery("nahida-bench-control", set_as_current=False)
    publisher.conf.update(celery_config(fleet.settings()))
    return build_fleet(fleet.settings(), CeleryTaskQueue(publisher))


def _first_turn(ledger: SqlLedger, session_id: str) -> datetime | None:
    for run in ledger.runs_of(session_id):
        for event in ledger.events(run.run_id):
            if event.type is EventType.ASSISTANT_OUTPUT:
                return event.created_at
    return None


def _done(ledger: SqlLedger, session_id: str) -> bool:
    session = ledger.get_session(session_id)
    return session is not None and session.status is SessionStatus.DONE


def _small_batch(rt: Runtime, repo: Path, n: int, timeout_s: float) -> list[float]:
    """Queue waits of ``n`` priority-9 sessions submitted now (seconds each)."""
    batch = rt.dispatcher.create_batch("small", {}).batch_id
    sent = datetime.now(UTC)
    ids = backlog(
        rt.dispatcher, scripted_job("small").session_spec(), repo, n, batch_id=batch, priority=9
    )
    wait_for(lambda: all(_first_turn(rt.ledger, s) for s in ids), timeout=timeout_s,
             what="the small batch", every=0.02)  # fmt: skip
    return [(_first_turn(rt.ledger, s) - sent).total_seconds() for s in ids]  # type: ignore[operator]


def _cancel_queued(rt: Runtime, repo: Path, n: int, timeout_s: float) -> tuple[list[float], int]:
    """Cancel ``n`` just-queued sessions; seconds each took to be sealed, and how many were not."""
    spec = scripted_job("cancelled").session_spec()
    ids = [rt.dispatcher.submit(spec, workspace=str(repo))[0].session_id for _ in range(n)]
    started: dict[str, float] = {}
    for sid in ids:
        started[sid] = time.monotonic()
        rt.inbox.cancel(sid)
    sealed: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(sealed) < n and time.monotonic() < deadline:
        for sid in ids:
            if sid not in sealed and _done(rt.ledger, sid):
                sealed[sid] = time.monotonic() - started[sid]
        time.sleep(0.02)
    return [sealed.get(s, timeout_s) for s in ids], n - len(sealed)


def _busy(rt: Runtime, repo: Path, slots: int) -> list[str]:
    """Keep every slot busy a while (the idle phase's stand-in for a backlog)."""
    spec = scripted_job("blocker", delay_s=4.0).session_spec()
    ids = [rt.dispatcher.submit(spec, workspace=str(repo))[0].session_id for _ in range(slots)]
    running = [SessionStatus.RUNNING]
    wait_for(lambda: len(rt.ledger.sessions(statuses=running)) >= slots, timeout=30,
             what="the slots to be busy")  # fmt: skip
    return ids


def _fires(store: SqlScheduleStore, sid: str, since: datetime) -> list[FireRecord]:
    return [f for f in store.fires(sid, limit=1000) if f.due_at >= since]


def _measure(phase: Phase, rt: Runtime, repo: Path, store: SqlScheduleStore, sid: str,
             args: argparse.Namespace, *, big: str | None = None) -> None:  # fmt: skip
    since = datetime.now(UTC)
    wait_for(lambda: len(_fires(store, sid, since)) >= args.fires,
             timeout=args.fires * args.every + 30, what=f"{args.fires} fires")  # fmt: skip
    fires = _fires(store, sid, since)[: args.fires]
    phase.lags = decision_lags_s(fires)
    phase.missed = sum(1 for f in fires if f.outcome is FireOutcome.MISSED)
    phase.waits = _small_batch(rt, repo, args.small, timeout_s=120)
    if big is not None:
        queued = [SessionStatus.QUEUED]
        phase.left = len(rt.ledger.sessions(batch_id=big, statuses=queued))
    if phase.name == "idle":
        _busy(rt, repo, args.slots)  # a cancel of a queued session: the slots are taken
    phase.cancels, phase.unsealed = _cancel_queued(rt, repo, args.cancels, args.cancel_timeout)


def _ms(samples: list[float], q: float) -> str:
    return f"{percentile(samples, q) * 1000:.0f} ms"


def _ratio(idle: list[float], loaded: list[float], q: float) -> str:
    base = max(percentile(idle, q), 0.001)
    return f"{percentile(loaded, q) / base:.1f}x"


def _report(idle: Phase, loaded: Phase, args: argparse.Namespace, left: int) -> None:
    print(
        f"control plane: {args.slots} slots, tick {args.tick:g}s, schedule every {args.every:g}s, "
        f"backlog {args.backlog} ({left} still queued after the fires and the small batch; "
        "1 beat, 1 session worker, "
        "PostgreSQL + Redis)"
    )
    rows = [
        ("fire decision lag", idle.lags, loaded.lags, 0.99),
        (f"small batch queue wait ({args.small} at priority 9)", idle.waits, loaded.waits, 1.0),
        (f"cancel-to-sealed ({args.cancels} queued)", idle.cancels, loaded.cancels, 1.0),
    ]
    for label, a, b, q in rows:
        which = "p99" if q < 1.0 else "max"
        print(
            f"{label}: idle p50 {_ms(a, 0.5)} {which} {_ms(a, q)} | backlog p50 {_ms(b, 0.5)} "
            f"{which} {_ms(b, q)} | ratio ({which}) {_ratio(a, b, q)}"
        )
    for phase in (idle, loaded):
        if phase.unsealed:
            print(
                f"  {phase.name}: {phase.unsealed} cancelled session(s) not sealed within "
                f"{args.cancel_timeout:g}s (counted as {args.cancel_timeout:g}s)"
            )
    print(f"fires recorded missed: {idle.missed + loaded.missed}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=5000, help="queued sessions")
    parser.add_argument("--slots", type=int, default=2, help="session worker slots")
    parser.add_argument(
        "--backlog-turn",
        type=float,
        default=0.2,
        help="seconds each backlog session's one turn takes (so the backlog outlasts the run)",
    )
    parser.add_argument("--fires", type=int, default=6, help="fires measured per phase")
    parser.add_argument("--every", type=float, default=2.0, help="schedule interval, seconds")
    parser.add_argument("--tick", type=float, default=1.0, help="NAHIDA_SCHEDULE_TICK_S")
    parser.add_argument("--small", type=int, default=5, help="sessions of the small batch")
    parser.add_argument("--cancels", type=int, default=3, help="queued sessions cancelled")
    parser.add_argument("--cancel-timeout", type=float, default=60.0, help="seconds, each phase")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis base URL")
    parser.add_argument("--quick", action="store_true", help="backlog 500, 3 fires (CI smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.backlog, args.fires, args.small, args.cancels = 500, 3, 3, 2
        args.cancel_timeout = min(args.cancel_timeout, 10.0)

    with (
        scratch_database("nahida_bench_control") as (url, _dsn),
        tempfile.TemporaryDirectory() as tmp,
    ):
        engine = make_engine(url)
        upgrade(engine)
        logs = Path(tmp) / "logs"
        logs.mkdir()
        repo = make_repo(Path(tmp) / "repo")
        fleet = Fleet(postgres_url=url, redis_url=args.redis, workdir=logs)
        fleet.extra_env.update(
            {"NAHIDA_SCHEDULE_TICK_S": str(args.tick), "NAHIDA_SWEEPER_INTERVAL_S": "5"}
        )
        idle, loaded = Phase("idle"), Phase("backlog")
        rt = _runtime(fleet)
        try:
            fleet.start_worker(name="bench-control-w", concurrency=args.slots)
            fleet.start_beat(name="bench-control-beat")
            store = SqlScheduleStore(engine)
            sid = uuid.uuid4().hex
            definition = ScheduleDef(
                name="bench-control",
                job=scripted_job("fired").model_dump(mode="json"),
                repos=(str(repo),),
                every_s=args.every,
                overlap=Overlap.ALLOW,
                catchup_window_s=max(60.0, 10 * args.every),
            )
            store.put(definition, schedule_id=sid, at=datetime.now(UTC))
            _measure(idle, rt, repo, store, sid, args)
            big = rt.dispatcher.create_batch("backlog", {}).batch_id
            rt.dispatcher.set_cap(f"batch:{big}", None)  # the backlog may take every slot
            slow = scripted_job("backlog", delay_s=args.backlog_turn).session_spec()
            backlog(rt.dispatcher, slow, repo, args.backlog, batch_id=big, threads=8)
            _measure(loaded, rt, repo, store, sid, args, big=big)
        finally:
            fleet.stop()
            fleet.purge_broker()
            rt.ledger.engine.dispose()
            engine.dispose()
    left = loaded.left or 0
    _report(idle, loaded, args, left)
    ok = idle.missed + loaded.missed == 0 and left > 0
    if left == 0:
        print("the backlog drained before the measurements ended: use a larger --backlog")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
