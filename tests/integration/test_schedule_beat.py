"""Schedules under real ``celery -A tasks beat`` processes (issue 14, "what it must show").

* two beats against one broker for more than five periods of a 2 s schedule:
  exactly one batch per scheduled fire time, one session per repository;
* overlap ``skip`` with a job slower than the interval: the overlapping fires
  are recorded skipped and no fire's session starts before the previous ends;
* a beat SIGKILLed for three periods and restarted: inside the catch-up window
  each missed fire runs once, oldest first; outside it they are recorded missed.

The exact catch-up tables are asserted with a fake clock in
``tests/unit/schedules/test_scheduler.py``; here each row must follow the rule.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.spec import JobSpec
from nahida_workers.schedules.model import FireOutcome, FireRecord, Overlap, ScheduleDef
from nahida_workers.schedules.scheduler import REDRIVE_AFTER_S
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing.fleet import Fleet, make_repo, wait_for

pytestmark = pytest.mark.slow

PERIOD_S = 2.0
TICK_ENV = {"NAHIDA_SCHEDULE_TICK_S": "0.5", "NAHIDA_SWEEPER_INTERVAL_S": "3600"}


def _job(name: str, turns: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "prompt": "scheduled work",
            "provider": {"kind": "scripted", "script": {"turns": turns}},
            "tools": tools,
        }
    )
    return spec.model_dump(mode="json")


QUICK = _job(
    "quick",
    [
        {
            "text": "look",
            "tool_calls": [{"id": "g", "name": "Glob", "arguments": {"pattern": "*"}}],
        },
        {"text": "Listed the files."},
    ],
    ["Glob"],
)
SLOW = _job(
    "slow",
    [
        {
            "text": "wait",
            "tool_calls": [{"id": "s", "name": "Bash", "arguments": {"command": "sleep 3"}}],
        },
        {"text": "Slept."},
    ],
    ["Bash"],
)


def _add(
    store: SqlScheduleStore, name: str, job: dict[str, Any], repos: list[Path], **kw: Any
) -> str:
    sid = uuid.uuid4().hex
    definition = ScheduleDef(
        name=name, job=job, repos=tuple(str(r) for r in repos), every_s=PERIOD_S, **kw
    )
    store.put(definition, schedule_id=sid, at=datetime.now(UTC))
    return sid


def _fires(store: SqlScheduleStore, sid: str) -> list[FireRecord]:
    return sorted(store.fires(sid, limit=1000), key=lambda f: f.fire_time)


def _settled(store: SqlScheduleStore, sid: str) -> bool:
    return all(f.outcome is not FireOutcome.DISPATCHING for f in _fires(store, sid))


def _contiguous(fires: list[FireRecord]) -> None:
    times = [f.fire_time for f in fires]
    assert times, "no fire was decided"
    assert all((b - a) == timedelta(seconds=PERIOD_S) for a, b in itertools.pairwise(times)), (
        f"a fire time was skipped or repeated: {times}"
    )


def _all_done(pg: SqlLedger) -> bool:
    unfinished = [SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING]
    return not pg.sessions(statuses=unfinished)


def test_two_beats_dispatch_each_fire_time_once_and_skip_never_overlaps(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.extra_env.update(TICK_ENV)
    repos = [make_repo(tmp_path / "repo-a"), make_repo(tmp_path / "repo-b")]
    store = SqlScheduleStore(pg.engine)
    fleet.start_worker(name="w1", concurrency=3)
    fleet.start_worker(name="w2", concurrency=3)
    beats = [fleet.start_beat(name="beat-a"), fleet.start_beat(name="beat-b")]
    every2 = _add(store, "every2", QUICK, repos, overlap=Overlap.ALLOW, catchup_window_s=30)
    slow = _add(store, "slow", SLOW, repos[:1], overlap=Overlap.SKIP, catchup_window_s=30)
    wait_for(lambda: len(_fires(store, every2)) >= 6, timeout=60, what="six fire periods")
    for beat in beats:
        beat.stop()
    wait_for(lambda: _settled(store, every2) and _settled(store, slow), timeout=30, what="dispatch")
    wait_for(lambda: _all_done(pg), timeout=60, what="every fire's sessions to finish")
    for beat in beats:
        assert "Running due control job nahida-schedule-tick" in beat.text()

    # exactly one batch per scheduled fire time, one session per repository
    fires = _fires(store, every2)
    assert len(fires) >= 6
    _contiguous(fires)
    assert {f.outcome for f in fires} == {FireOutcome.DISPATCHED}
    batches = [b for b in pg.batches() if b.spec.get("schedule", {}).get("schedule_id") == every2]
    assert sorted(b.batch_id for b in batches) == sorted(f.batch_id for f in fires)  # type: ignore[misc]
    for fire in fires:
        sessions = pg.sessions(batch_id=fire.batch_id)
        assert sorted(s.workspace for s in sessions) == sorted(str(r) for r in repos)
        for session in sessions:
            (run,) = pg.runs_of(session.session_id)
            assert run.terminal_state is not None and run.terminal_state.value == "completed"

    deciders = {f.decided_by for f in fires}
    print(
        f"two beats: {len(fires)} fire times, {len(batches)} batches, "
        f"{sum(len(pg.sessions(batch_id=f.batch_id)) for f in fires)} sessions, "
        f"decided by {len(deciders)} worker processes"
    )

    # skip: overlapping fires recorded skipped, and no two fires' sessions ever overlapped
    slow_fires = _fires(store, slow)
    _contiguous(slow_fires)
    dispatched = [f for f in slow_fires if f.outcome is FireOutcome.DISPATCHED]
    skipped = [f for f in slow_fires if f.outcome is FireOutcome.SKIPPED_OVERLAP]
    assert dispatched and skipped and len(dispatched) + len(skipped) == len(slow_fires)
    assert all(f.batch_id is None and f.detail["running"] for f in skipped)
    runs = []
    for fire in dispatched:
        (session,) = pg.sessions(batch_id=fire.batch_id)
        (run,) = pg.runs_of(session.session_id)
        assert run.ended_at is not None
        runs.append(run)
    for previous, following in itertools.pairwise(runs):
        assert following.started_at >= previous.ended_at, "two fires of a skip schedule overlapped"


def test_beat_killed_for_three_periods_catches_up_inside_the_window_and_misses_outside(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.extra_env.update(TICK_ENV)
    repo = make_repo(tmp_path / "repo")
    store = SqlScheduleStore(pg.engine)
    fleet.start_worker(name="w1", concurrency=4)
    beat = fleet.start_beat(name="beat-a")
    inside = _add(store, "inside", QUICK, [repo], overlap=Overlap.ALLOW, catchup_window_s=60)
    outside = _add(store, "outside", QUICK, [repo], overlap=Overlap.ALLOW, catchup_window_s=3)
    wait_for(
        lambda: all(len(_fires(store, s)) >= 2 for s in (inside, outside)),
        timeout=30,
        what="two on-time fires each",
    )
    beat.kill(signal.SIGKILL)
    beat.proc.wait(timeout=10)
    killed_at = datetime.now(UTC)
    # Beat dispatches the fires it decides: one killed mid-dispatch stays
    # ``dispatching`` until the next beat re-drives it (REDRIVE_AFTER_S).
    before = {s: _fires(store, s)[-1].fire_time for s in (inside, outside)}
    outage = 3 * PERIOD_S + 0.5
    time.sleep(outage)  # the outage itself: three fire periods with no beat
    assert {s: _fires(store, s)[-1].fire_time for s in (inside, outside)} == before, (
        "nothing may be decided while no beat runs"
    )
    restarted_at = datetime.now(UTC)
    beat = fleet.start_beat(name="beat-b")
    wait_for(
        lambda: all(_fires(store, s)[-1].fire_time > restarted_at for s in (inside, outside)),
        timeout=30,
        what="fires after the restart",
    )
    wait_for(
        lambda: _settled(store, inside) and _settled(store, outside),
        timeout=REDRIVE_AFTER_S + 30,
        what="dispatch (a fire the kill interrupted is re-driven)",
    )
    beat.stop()  # SIGTERM: beat lets the dispatch in flight finish
    wait_for(
        lambda: _settled(store, inside) and _settled(store, outside), timeout=20, what="dispatch"
    )

    for sid in (inside, outside):
        _contiguous(_fires(store, sid))
    missed_during = [
        f for f in _fires(store, inside) if before[inside] < f.fire_time <= restarted_at
    ]
    assert len(missed_during) >= 3
    # inside the window: each missed fire ran once, oldest first, as one batch each
    assert {f.outcome for f in _fires(store, inside)} == {FireOutcome.DISPATCHED}
    assert all(f.detail["late_s"] > PERIOD_S for f in missed_during[:-1])
    created = [pg.get_batch(f.batch_id).created_at for f in missed_during]  # type: ignore[arg-type, union-attr]
    assert created == sorted(created)
    assert len({f.batch_id for f in _fires(store, inside)}) == len(_fires(store, inside))
    # outside the window: a fire later than 3 s is recorded missed and never dispatched
    late = [f for f in _fires(store, outside) if before[outside] < f.fire_time <= restarted_at]
    assert len(late) >= 3
    for fire in _fires(store, outside):
        if fire.detail["late_s"] > 3:
            assert fire.outcome is FireOutcome.MISSED and fire.batch_id is None
        else:
            assert fire.outcome is FireOutcome.DISPATCHED
    missed = [f for f in late if f.outcome is FireOutcome.MISSED]
    assert len(missed) >= 2, [(f.fire_time, f.outcome, f.detail) for f in late]
    assert killed_at < restarted_at
    scheduled_batches = {b.batch_id for b in pg.batches()}
    assert not any(f.batch_id in scheduled_batches for f in missed)
