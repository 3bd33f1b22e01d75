"""Fire-to-first-provider-call latency of scheduled jobs (DESIGN.md section 8).

A real ``celery -A tasks beat`` ticks every ``--tick`` seconds; a real
``celery -A tasks worker -Q sessions`` runs the tick and the sessions; the
ledger is a scratch PostgreSQL database and the broker Redis.  One schedule
fires every ``--every`` seconds (overlap ``allow``) over one repository with a
zero-latency scripted provider, so what is measured is the fleet's own path:

    fire time -> a tick decides it -> batch and session written -> a worker
    owns the session -> first provider turn committed

"first provider call" is the commit of the run's first ``assistant_output``
event (the scripted provider answers at once, so the call ends there).

Baseline measured in the same run: the same session dispatched directly
(``Dispatcher.submit``, the ``nahida batch`` path), dispatch to first provider
call.  A fire's extra latency is mostly the wait for the next tick: expect
up to one tick interval more than the baseline.

Every fire must be dispatched exactly once (contiguous fire times, one batch
each); the run exits 1 otherwise.  Nothing is asserted about wall time.

    python -m bench.schedule                # 12 fires, every 2 s, tick 0.5 s
    python -m bench.schedule --quick        # CI smoke: 3 fires
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import percentile, scratch_database
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.spec import JobSpec
from nahida_workers.schedules.model import FireOutcome, FireRecord, Overlap, ScheduleDef
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing.fleet import Fleet, make_repo, wait_done, wait_for

TURNS = [
    {"text": "look", "tool_calls": [{"id": "g", "name": "Glob", "arguments": {"pattern": "*"}}]},
    {"text": "Listed the files."},
]


def _job() -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "bench-schedule",
            "prompt": "list the files",
            "provider": {"kind": "scripted", "script": {"turns": TURNS}},
            "tools": ["Glob"],
        }
    )


def _first_call(ledger: SqlLedger, session_id: str) -> datetime:
    """When the session's first provider turn was committed."""
    (run,) = ledger.runs_of(session_id)
    called = next(
        e.created_at for e in ledger.events(run.run_id) if e.type is EventType.ASSISTANT_OUTPUT
    )
    assert called is not None
    return called


def _ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000.0


def _line(label: str, samples: list[float]) -> str:
    return (
        f"{label}: p50 {percentile(samples, 0.5):.0f} ms, p95 {percentile(samples, 0.95):.0f} ms, "
        f"max {max(samples):.0f} ms (n={len(samples)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fires", type=int, default=12, help="scheduled fires to measure")
    parser.add_argument("--every", type=float, default=2.0, help="schedule interval, seconds")
    parser.add_argument("--tick", type=float, default=0.5, help="NAHIDA_SCHEDULE_TICK_S")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis base URL")
    parser.add_argument("--quick", action="store_true", help="3 fires (CI smoke)")
    args = parser.parse_args(argv)
    fires_wanted = 3 if args.quick else args.fires

    with (
        scratch_database("nahida_bench_sched") as (url, _dsn),
        tempfile.TemporaryDirectory() as tmp,
    ):
        engine = make_engine(url)
        upgrade(engine)
        ledger = SqlLedger(engine=engine)
        store = SqlScheduleStore(engine)
        logs = Path(tmp) / "logs"
        logs.mkdir()
        repo = make_repo(Path(tmp) / "repo")
        fleet = Fleet(postgres_url=url, redis_url=args.redis, workdir=logs)
        fleet.extra_env.update(
            {"NAHIDA_SCHEDULE_TICK_S": str(args.tick), "NAHIDA_SWEEPER_INTERVAL_S": "3600"}
        )
        try:
            fleet.start_worker(name="bench-sched-w", concurrency=4)
            # baseline: the same session dispatched directly, one at a time
            dispatcher = fleet.dispatcher(ledger)
            spec = _job().session_spec()
            direct = []
            for _ in range(fires_wanted):
                sent = datetime.now(UTC)
                session, _ = dispatcher.submit(spec, workspace=str(repo))
                wait_done(ledger, session.session_id, timeout=60)
                direct.append(_ms(_first_call(ledger, session.session_id) - sent))
            beat = fleet.start_beat(name="bench-sched-beat")
            sid = uuid.uuid4().hex
            definition = ScheduleDef(
                name="bench",
                job=_job().model_dump(mode="json"),
                repos=(str(repo),),
                every_s=args.every,
                overlap=Overlap.ALLOW,
                catchup_window_s=max(60.0, 10 * args.every),
            )
            store.put(definition, schedule_id=sid, at=datetime.now(UTC))
            started = time.monotonic()

            def dispatched() -> list[FireRecord]:
                return [
                    f for f in store.fires(sid, limit=1000) if f.outcome is FireOutcome.DISPATCHED
                ]

            wait_for(
                lambda: len(dispatched()) >= fires_wanted,
                timeout=fires_wanted * args.every + 60,
                what=f"{fires_wanted} fires",
            )
            beat.stop()
            wall = time.monotonic() - started
            unfinished = [SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING]
            wait_for(lambda: not ledger.sessions(statuses=unfinished), timeout=60, what="sessions")
            fires = sorted(store.fires(sid, limit=1000), key=lambda f: f.fire_time)
        finally:
            fleet.stop()

        parts: dict[str, list[float]] = {k: [] for k in ("tick", "dispatch", "call", "total")}
        for fire in fires:
            if fire.outcome is not FireOutcome.DISPATCHED:
                continue
            (session,) = ledger.sessions(batch_id=fire.batch_id)
            (run,) = ledger.runs_of(session.session_id)
            called = _first_call(ledger, session.session_id)
            parts["tick"].append(_ms(fire.decided_at - fire.fire_time))
            parts["dispatch"].append(_ms(run.started_at - fire.decided_at))
            parts["call"].append(_ms(called - run.started_at))
            parts["total"].append(_ms(called - fire.fire_time))
        times = [f.fire_time for f in fires]
        contiguous = all(
            b - a == timedelta(seconds=args.every) for a, b in itertools.pairwise(times)
        )
        batches = [f.batch_id for f in fires]
        once = contiguous and len(set(batches)) == len(batches) and all(batches)
        engine.dispose()

    print(
        f"schedule every {args.every:g}s, tick {args.tick:g}s, {len(fires)} fires in {wall:.1f}s "
        "(1 beat, 1 session worker, PostgreSQL + Redis)"
    )
    print(_line("fire-to-first-provider-call", parts["total"]))
    print(_line("  fire time -> tick decided it", parts["tick"]))
    print(_line("  decided -> session written", parts["dispatch"]))
    print(_line("  session written -> first provider turn committed", parts["call"]))
    print(_line("baseline: direct dispatch-to-first-provider-call", direct))
    extra = percentile(parts["total"], 0.5) - percentile(direct, 0.5)
    print(
        f"schedule path adds (p50): {extra:.0f} ms; "
        f"the tick interval bounds the wait for a tick at {args.tick * 1000:.0f} ms"
    )
    print(f"every fire dispatched exactly once: {'yes' if once else 'NO'}")
    return 0 if once else 1


if __name__ == "__main__":
    sys.exit(main())
