"""The ScheduleStore contract: the in-memory twin, SQLite and PostgreSQL (issue 14).

The rule that makes two beats safe is checked with real concurrency on the
real databases: many threads commit a plan from the same version; exactly
one wins and writes the fire rows, the others write nothing.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from nahida_workers.errors import NotFoundError
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import make_engine
from nahida_workers.schedules.model import FireOutcome, Overlap, ScheduleDef
from nahida_workers.schedules.policy import Plan, plan_tick, plan_trigger
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.schedules.store import (
    REMOVED_ERROR,
    Change,
    MemoryScheduleStore,
    ScheduleStore,
)
from tests.conftest import truncate

T0 = datetime(2026, 3, 29, 0, 59, 0, 250000, tzinfo=UTC)
JOB = {"name": "demo", "prompt": "p"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def definition(name: str = "nightly", **fields: Any) -> ScheduleDef:
    fields.setdefault("every_s", 10)
    return ScheduleDef(name=name, job=JOB, repos=("/r1", "/r2"), **fields)


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'sched.sqlite3'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> ScheduleStore:
    if request.param == "memory":
        return MemoryScheduleStore()
    if request.param == "sqlite":
        return SqlScheduleStore(request.getfixturevalue("sqlite_engine"))
    engine: Engine = request.getfixturevalue("postgres_engine")
    truncate(engine)
    return SqlScheduleStore(engine)


def test_put_creates_updates_and_is_idempotent(store: ScheduleStore) -> None:
    created, change = store.put(definition(), schedule_id="s1", at=T0)
    assert change is Change.CREATED
    assert (created.schedule_id, created.cursor, created.version, created.paused) == (
        "s1",
        T0,
        0,
        False,
    )
    same, change = store.put(definition(), schedule_id="other", at=at(5))
    assert change is Change.UNCHANGED and same == created
    updated, change = store.put(definition(overlap=Overlap.ALLOW), schedule_id="other", at=at(6))
    assert change is Change.UPDATED
    assert updated.schedule_id == "s1" and updated.version == 1 and updated.cursor == T0
    assert updated.definition.overlap is Overlap.ALLOW
    assert store.get("nightly") == updated
    assert store.get_by_id("s1") == updated
    assert store.get("missing") is None


def test_an_update_that_changes_the_trigger_moves_the_cursor_to_the_edit(
    store: ScheduleStore,
) -> None:
    store.put(definition(), schedule_id="s1", at=T0)
    kept, _ = store.put(definition(jitter_s=5), schedule_id="s1", at=at(60))
    assert kept.cursor == T0  # same trigger: pending fire times stay pending
    for n, change in enumerate(
        [{"cron": "*/5 * * * *"}, {"cron": "*/5 * * * *", "timezone": "Asia/Tokyo"}],
        start=1,
    ):
        moved, _ = store.put(
            definition(every_s=None, **change), schedule_id="s1", at=at(60 * (n + 1))
        )
        assert moved.cursor == at(60 * (n + 1)) and moved.version == n + 1
    every, _ = store.put(definition(every_s=60), schedule_id="s1", at=at(30))
    # the trigger changed again, but a cursor never moves back
    assert every.cursor == at(180)


def test_definitions_round_trip_exactly(store: ScheduleStore) -> None:
    d = definition(
        "berlin", every_s=None, cron="30 2 * * *", timezone="Europe/Berlin", jitter_s=1.5
    )
    stored, _ = store.put(d, schedule_id="s2", at=T0)
    assert store.get("berlin").definition == d  # type: ignore[union-attr]
    assert stored.definition == d


def test_live_pause_resume_remove(store: ScheduleStore) -> None:
    store.put(definition("b"), schedule_id="sb", at=T0)
    store.put(definition("a"), schedule_id="sa", at=T0)
    assert [s.name for s in store.live()] == ["a", "b"]
    paused = store.set_paused("a", True, at=at(10))
    assert paused.paused and paused.paused_at == at(10) and paused.version == 1
    assert store.set_paused("a", True, at=at(11)).version == 1  # already paused: no write
    resumed = store.set_paused("a", False, at=at(20))
    assert not resumed.paused and resumed.cursor == at(20) and resumed.version == 2
    removed = store.remove("a", at=at(30))
    assert removed.removed_at == at(30)
    assert [s.name for s in store.live()] == ["b"]
    assert store.get("a") is None and store.get_by_id("sa") is not None
    again, change = store.put(definition("a"), schedule_id="sa2", at=at(40))  # name is free again
    assert change is Change.CREATED and again.schedule_id == "sa2"
    assert [(s.schedule_id, s.removed_at) for s in store.removed()] == [("sa", at(30))]
    store.remove("a", at=at(50))
    assert [s.schedule_id for s in store.removed()] == ["sa2", "sa"]  # the latest removal first
    with pytest.raises(NotFoundError):
        store.set_paused("zzz", True, at=T0)
    with pytest.raises(NotFoundError):
        store.remove("zzz", at=T0)


def test_commit_plan_is_a_compare_and_set_on_the_version(store: ScheduleStore) -> None:
    schedule, _ = store.put(
        definition(overlap=Overlap.SKIP, catchup_window_s=25), schedule_id="s", at=T0
    )
    plan = plan_tick(schedule, now=at(31))
    assert [d.outcome for d in plan.decisions] == [
        FireOutcome.DISPATCHING,
        FireOutcome.SKIPPED_OVERLAP,
        FireOutcome.SKIPPED_OVERLAP,
    ]
    written = store.commit_plan("s", version=0, plan=plan, at=at(31), by="beat-a")
    assert written is not None and [f.fire_time for f in written] == [
        d.fire_time for d in plan.decisions
    ]
    assert store.commit_plan("s", version=0, plan=plan, at=at(31), by="beat-b") is None
    after = store.get("nightly")
    assert after is not None and after.version == 1 and after.cursor == plan.cursor
    fires = store.fires("s")
    assert [f.fire_time for f in fires] == sorted(
        (d.fire_time for d in plan.decisions), reverse=True
    )
    first = fires[-1]
    assert first.decided_by == "beat-a" and first.attempts == 1 and first.batch_id
    assert first.detail["late_s"] == plan.decisions[0].detail["late_s"]
    assert fires[0].attempts == 0 and fires[0].batch_id is None
    assert [f.fire_time for f in store.open_fires("s")] == [first.fire_time]


def test_a_fire_time_is_decided_once_even_by_a_winning_version(store: ScheduleStore) -> None:
    schedule, _ = store.put(definition(), schedule_id="s", at=T0)
    manual = plan_trigger(schedule, now=at(3))
    assert store.commit_plan("s", version=0, plan=manual, at=at(3), by="a")
    # the same fire time again, from the current version: the row exists, nothing is written
    assert store.commit_plan("s", version=1, plan=manual, at=at(4), by="b") == []
    (fire,) = store.fires("s")
    assert fire.decided_by == "a"


def test_fire_transitions_are_conditional(store: ScheduleStore) -> None:
    schedule, _ = store.put(definition(overlap=Overlap.BUFFER_ONE), schedule_id="s", at=T0)
    first = plan_tick(schedule, now=at(11))
    store.commit_plan("s", version=0, plan=first, at=at(11), by="a")
    t10 = first.decisions[0].fire_time
    assert store.mark_dispatched("s", t10, at=at(12))
    assert not store.mark_dispatched("s", t10, at=at(13))
    fire = store.get_fire("s", t10)
    assert (
        fire is not None and fire.outcome is FireOutcome.DISPATCHED and fire.dispatched_at == at(12)
    )
    assert "undelivered" not in fire.detail  # every session was sent
    schedule = store.get("nightly")
    assert schedule is not None
    second = plan_tick(schedule, now=at(21), active=[t10])
    assert second.decisions[0].outcome is FireOutcome.BUFFERED
    store.commit_plan("s", version=schedule.version, plan=second, at=at(21), by="a")
    t20 = second.decisions[0].fire_time
    assert [f.outcome for f in store.open_fires("s")] == [
        FireOutcome.DISPATCHED,
        FireOutcome.BUFFERED,
    ]
    assert store.mark_finished("s", t10, at=at(25))
    assert not store.mark_finished("s", t10, at=at(26))
    schedule = store.get("nightly")
    assert schedule is not None
    release = Plan(release=t20)
    written = store.commit_plan("s", version=schedule.version, plan=release, at=at(27), by="b")
    assert written is not None and [(f.fire_time, f.outcome) for f in written] == [
        (t20, FireOutcome.DISPATCHING)
    ]
    assert written[0].attempts == 1
    assert [f.fire_time for f in store.open_fires("s")] == [t20]


def test_a_fire_dispatched_with_undelivered_sessions_says_how_many(store: ScheduleStore) -> None:
    """The broker was down: the sessions are recorded, the sweeper publishes them."""
    schedule, _ = store.put(definition(), schedule_id="s", at=T0)
    plan = plan_tick(schedule, now=at(11))
    store.commit_plan("s", version=0, plan=plan, at=at(11), by="a")
    t10 = plan.decisions[0].fire_time
    assert store.mark_dispatched("s", t10, at=at(12), undelivered=3)
    assert not store.mark_dispatched("s", t10, at=at(13), undelivered=5)
    fire = store.get_fire("s", t10)
    assert fire is not None and fire.outcome is FireOutcome.DISPATCHED
    assert fire.detail["undelivered"] == 3 and "late_s" in fire.detail
    assert fire.dispatched_at == at(12)


def test_redrive_claims_are_exclusive_and_fail_is_final(store: ScheduleStore) -> None:
    schedule, _ = store.put(definition(), schedule_id="s", at=T0)
    plan = plan_tick(schedule, now=at(11))
    store.commit_plan("s", version=0, plan=plan, at=at(11), by="a")
    t10 = plan.decisions[0].fire_time
    assert store.stale_dispatching(older_than=at(11)) == []
    (stale,) = store.stale_dispatching(older_than=at(50))
    assert store.claim_redrive("s", t10, seen=stale.updated_at, at=at(50))
    assert not store.claim_redrive("s", t10, seen=stale.updated_at, at=at(50))  # the other ticker
    fire = store.get_fire("s", t10)
    assert fire is not None and fire.attempts == 2 and fire.updated_at == at(50)
    assert store.fail("s", t10, error="boom", at=at(60))
    assert not store.fail("s", t10, error="again", at=at(61))
    fire = store.get_fire("s", t10)
    assert fire is not None and fire.outcome is FireOutcome.FAILED
    assert fire.detail["error"] == "boom" and "late_s" in fire.detail
    assert not store.mark_dispatched("s", t10, at=at(70))
    assert store.open_fires("s") == []


def test_removed_schedules_take_no_decision(store: ScheduleStore) -> None:
    schedule, _ = store.put(definition(), schedule_id="s", at=T0)
    store.remove("nightly", at=at(1))
    plan = plan_tick(schedule, now=at(11))
    assert store.commit_plan("s", version=1, plan=plan, at=at(11), by="a") is None
    assert store.fires("s") == []


def test_remove_fails_the_buffered_fires_and_leaves_the_others(store: ScheduleStore) -> None:
    schedule, _ = store.put(definition(overlap=Overlap.BUFFER_ONE), schedule_id="s", at=T0)
    first = plan_tick(schedule, now=at(11))
    store.commit_plan("s", version=0, plan=first, at=at(11), by="a")
    t10 = first.decisions[0].fire_time
    current = store.get("nightly")
    assert current is not None
    second = plan_tick(current, now=at(21), active=[t10])
    store.commit_plan("s", version=current.version, plan=second, at=at(21), by="a")
    t20 = second.decisions[0].fire_time
    store.remove("nightly", at=at(22))
    buffered = store.get_fire("s", t20)
    assert buffered is not None and buffered.outcome is FireOutcome.FAILED
    assert buffered.detail["error"] == REMOVED_ERROR and "late_s" in buffered.detail
    assert buffered.updated_at == at(22)
    claimed = store.get_fire("s", t10)  # maybe mid-dispatch: left to the re-drive
    assert claimed is not None and claimed.outcome is FireOutcome.DISPATCHING
    assert [f.fire_time for f in store.open_fires("s")] == [t10]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_commits_from_one_version_have_exactly_one_winner(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Eight "beats" in threads commit the same plan at once, five rounds."""
    if backend == "sqlite":
        engine = request.getfixturevalue("sqlite_engine")
    else:
        engine = request.getfixturevalue("postgres_engine")
        truncate(engine)
    stores = [SqlScheduleStore(engine) for _ in range(8)]
    stores[0].put(definition(overlap=Overlap.ALLOW), schedule_id="s", at=T0)
    for round_ in range(1, 6):
        now = at(round_ * 10 + 0.5)
        schedule = stores[0].get("nightly")
        assert schedule is not None
        results = _race(stores, schedule.version, plan_tick(schedule, now=now), now)
        winners = [r for r in results if r is not None]
        assert len(results) == len(stores) and len(winners) == 1, results
        assert len(winners[0]) == 1
    fires = stores[0].fires("s")
    assert len(fires) == 5 and len({f.fire_time for f in fires}) == 5


def _race(stores: list[SqlScheduleStore], version: int, plan: Plan, now: datetime) -> list[Any]:
    """Every store commits ``plan`` from ``version`` at once (a barrier lines them up)."""
    barrier = threading.Barrier(len(stores))
    results: list[Any] = []
    lock = threading.Lock()

    def beat(store: SqlScheduleStore, who: int) -> None:
        barrier.wait()
        written = store.commit_plan("s", version=version, plan=plan, at=now, by=f"beat-{who}")
        with lock:
            results.append(written)

    threads = [threading.Thread(target=beat, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results
