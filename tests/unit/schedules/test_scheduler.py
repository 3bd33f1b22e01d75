"""The tick over in-memory ports with a fake clock (issue 14 items 2-4).

Catch-up is checked exactly here (every fire time, its outcome, its batch);
the real-process tests in tests/integration/test_schedule_beat.py show the
same with two real beats.
"""

from __future__ import annotations

from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.schedules.model import FireKind, FireOutcome, Overlap
from nahida_workers.schedules.policy import fire_batch_id, session_key
from nahida_workers.schedules.scheduler import MAX_DISPATCH_ATTEMPTS, REDRIVE_AFTER_S
from nahida_workers.schedules.store import REMOVED_ERROR
from tests.unit.schedules.world import JOB, World, sweeper_for


def tick_every_second(world: World, until: float, *schedulers_who: str) -> None:
    """Tick once per simulated second (each named beat in turn) up to ``until``."""
    beats = [world.scheduler(who) for who in schedulers_who or ("beat-a",)]
    now = (world.clock.now() - world.at(0)).total_seconds()
    while now < until:
        now += 1
        world.move_to(now)
        for beat in beats:
            beat.tick()


def test_one_batch_per_fire_time_with_one_session_per_repository() -> None:
    world = World()
    world.add(overlap=Overlap.ALLOW)
    tick_every_second(world, 60.5, "beat-a", "beat-b")
    fires = world.fires()
    assert [f.fire_time for f in fires] == [world.at(s) for s in range(10, 61, 10)]
    assert all(f.outcome is FireOutcome.DISPATCHED for f in fires)
    batches = {b.batch_id for b in world.ledger.batches()}
    assert batches == {f.batch_id for f in fires}
    for fire in fires:
        assert fire.batch_id == fire_batch_id("id-s", fire.fire_time)
        sessions = world.ledger.sessions(batch_id=fire.batch_id)
        assert sorted(s.workspace for s in sessions) == ["/r1", "/r2"]
        assert {s.idempotency_key for s in sessions} == {
            session_key("id-s", fire.fire_time, repo) for repo in ("/r1", "/r2")
        }
    assert len(world.queue.published) == 2 * len(fires)  # one task per session, none twice
    assert world.outcomes.count(("s", FireOutcome.DISPATCHED)) == len(fires)


def test_batch_spec_carries_the_schedule_name_and_fire_time() -> None:
    world = World()
    world.add()
    world.move_to(10.2)
    world.scheduler().tick()
    (batch,) = world.ledger.batches()
    assert batch.job_name == "demo"
    assert batch.spec["schedule"] == {
        "name": "s",
        "schedule_id": "id-s",
        "fire_time": "2026-01-01T00:00:10.000Z",
        "kind": "scheduled",
    }


def _down_for_three_periods(window: float, overlap: Overlap) -> World:
    """Ticks for two periods, beat down over fires 30, 40, 50, back at 51.5 s."""
    world = World()
    world.add(catchup_window_s=window, overlap=overlap)
    tick_every_second(world, 20.5)
    for fire in world.fires():
        world.finish(fire.batch_id)  # the on-time fires are done before the outage
    world.move_to(51.5)
    world.scheduler().tick()
    return world


def test_catch_up_inside_the_window_runs_each_missed_fire_once_oldest_first() -> None:
    world = _down_for_three_periods(window=30, overlap=Overlap.ALLOW)
    assert world.table() == [(t, "dispatched") for t in (10, 20, 30, 40, 50)]
    late = [f for f in world.fires() if f.fire_time >= world.at(30)]
    assert [f.detail["late_s"] for f in late] == [21.5, 11.5, 1.5]
    assert [f.fire_time for f in late] == sorted(f.fire_time for f in late)
    # ticking on changes nothing for those fire times
    tick_every_second(world, 55)
    assert world.table() == [(t, "dispatched") for t in (10, 20, 30, 40, 50)]
    assert len(world.ledger.batches()) == 5


def test_catch_up_outside_the_window_records_missed_and_runs_none_of_them() -> None:
    world = _down_for_three_periods(window=5, overlap=Overlap.ALLOW)
    assert world.table() == [
        (10, "dispatched"),
        (20, "dispatched"),
        (30, "missed"),
        (40, "missed"),
        (50, "dispatched"),  # on time (1.5 s late, inside the window)
    ]
    assert len(world.ledger.batches()) == 3
    assert world.outcomes.count(("s", FireOutcome.MISSED)) == 2


def test_catch_up_partly_inside_the_window() -> None:
    world = _down_for_three_periods(window=15, overlap=Overlap.ALLOW)
    assert world.table()[2:] == [(30, "missed"), (40, "dispatched"), (50, "dispatched")]


def test_catch_up_under_skip_runs_the_oldest_missed_fire_and_skips_the_overlapping() -> None:
    world = _down_for_three_periods(window=30, overlap=Overlap.SKIP)
    assert world.table()[2:] == [
        (30, "dispatched"),
        (40, "skipped_overlap"),
        (50, "skipped_overlap"),
    ]


def test_skip_with_a_job_slower_than_the_interval_never_overlaps() -> None:
    """Each fire's sessions take 25 s on a 10 s schedule: the fires in between are skipped."""
    world = World()
    world.add()  # overlap skip is the default
    beat = world.scheduler()
    started: dict[str, float] = {}
    for second in range(1, 101):
        world.move_to(second)
        for batch_id, began in list(started.items()):
            if second - began >= 25:
                world.finish(batch_id)
                del started[batch_id]
        beat.tick()
        for fire in world.fires():
            fresh = fire.outcome is FireOutcome.DISPATCHED and fire.batch_id not in started
            if fresh and fire.batch_id in world.running_batches():
                started[fire.batch_id] = second
        assert len(world.running_batches()) <= 1, f"two fires ran at once at {second}s"
    table = world.table()
    assert table[:6] == [
        (10, "dispatched"),
        (20, "skipped_overlap"),
        (30, "skipped_overlap"),
        (40, "dispatched"),
        (50, "skipped_overlap"),
        (60, "skipped_overlap"),
    ]
    skipped = [f for f in world.fires() if f.outcome is FireOutcome.SKIPPED_OVERLAP]
    assert all(f.batch_id is None for f in skipped)
    assert all(f.detail["running"] for f in skipped)
    assert len(world.ledger.batches()) == len(table) - len(skipped)


def test_buffer_one_runs_the_buffered_fire_after_the_running_one_finishes() -> None:
    world = World()
    world.add(overlap=Overlap.BUFFER_ONE)
    beat = world.scheduler()
    world.move_to(10.5)
    beat.tick()
    world.move_to(30.5)
    beat.tick()
    assert world.table() == [(10, "dispatched"), (20, "buffered"), (30, "skipped_overlap")]
    assert world.running_batches() == {fire_batch_id("id-s", world.at(10))}
    world.finish(fire_batch_id("id-s", world.at(10)))
    world.move_to(31)
    beat.tick()
    assert world.table() == [(10, "dispatched"), (20, "dispatched"), (30, "skipped_overlap")]
    assert world.running_batches() == {fire_batch_id("id-s", world.at(20))}


def test_cancel_previous_cancels_the_running_sessions_and_runs_the_new_fire() -> None:
    world = World()
    world.add(overlap=Overlap.CANCEL_PREVIOUS)
    beat = world.scheduler()
    world.move_to(10.5)
    beat.tick()
    first = {
        s.session_id for s in world.ledger.sessions(batch_id=fire_batch_id("id-s", world.at(10)))
    }
    world.move_to(20.5)
    beat.tick()
    assert set(world.cancelled) == first
    assert world.table() == [(10, "dispatched"), (20, "dispatched")]
    assert world.fires()[1].detail["cancelled"] == ["2026-01-01T00:00:10.000Z"]


def test_two_beats_ticking_at_the_same_instant_decide_each_fire_once() -> None:
    world = World()
    world.add()
    a, b = world.scheduler("beat-a"), world.scheduler("beat-b")
    world.move_to(10.5)
    schedule = world.store.get("s")
    assert schedule is not None
    # both planned from the same version; b commits second and writes nothing
    from nahida_workers.schedules.policy import plan_tick

    plan = plan_tick(schedule, now=world.clock.now())
    won = world.store.commit_plan(
        "id-s", version=schedule.version, plan=plan, at=world.clock.now(), by="a"
    )
    lost = world.store.commit_plan(
        "id-s", version=schedule.version, plan=plan, at=world.clock.now(), by="b"
    )
    assert won is not None and lost is None
    a.tick()
    b.tick()
    assert world.table() == [(10, "dispatching")]  # claimed by "a", whose dispatch never ran
    assert world.ledger.batches() == []
    # a crash between claim and dispatch: a later tick re-drives the claimed fire
    world.clock.advance(REDRIVE_AFTER_S + 1)
    b.tick()
    assert world.table()[0] == (10, "dispatched")
    assert len(world.ledger.sessions(batch_id=fire_batch_id("id-s", world.at(10)))) == 2


def test_a_fire_during_a_broker_outage_records_every_session_and_the_sweeper_sends_them() -> None:
    # The sessions after the first failed send were not recorded: the fire
    # stayed `dispatching` and was marked failed after 5 re-drives (~2.5 min),
    # so an outage longer than that lost them.  Now the fire records them all.
    world = World()
    world.add(repos=("/r1", "/r2", "/r3"))
    beat = world.scheduler()
    world.queue.fail = True
    world.move_to(10.5)
    report = beat.tick()
    (fire,) = world.fires()
    assert world.table() == [(10, "dispatched")] and fire.detail["undelivered"] == 3
    assert [(f.fire_time, n) for f, n in report.deferred] == [(world.at(10), 3)]
    sessions = world.ledger.sessions(batch_id=fire.batch_id)
    assert sorted(s.workspace for s in sessions) == ["/r1", "/r2", "/r3"]
    assert len(world.ledger.pending_outbox()) == 3 and world.queue.published == []
    assert world.outcomes == [("s", FireOutcome.DISPATCHED)]
    # however long the broker stays down, the fire is never failed or re-driven
    for _ in range(MAX_DISPATCH_ATTEMPTS + 2):
        world.clock.advance(REDRIVE_AFTER_S + 1)
        beat.tick()
    assert all(outcome != "failed" for _t, outcome in world.table())
    assert len(world.ledger.sessions(batch_id=fire.batch_id)) == 3
    # the broker is back: one sweep publishes every session of the fire, once
    world.queue.fail = False
    assert sweeper_for(world).sweep().outbox_published > 0
    published = {sid for sid, _task in world.queue.published}
    assert {s.session_id for s in sessions} <= published
    assert world.ledger.pending_outbox() == []


def test_a_fire_cut_off_by_the_ledger_is_redriven_without_a_second_session() -> None:
    world = World()
    world.add()
    beat = world.scheduler()
    opened = world.ledger.open_session
    calls = iter([opened, _ledger_down])  # the ledger fails before the second record

    def open_session(*args: object, **kwargs: object) -> object:
        return next(calls, opened)(*args, **kwargs)

    world.ledger.open_session = open_session
    world.move_to(10.5)
    report = beat.tick()
    assert report.errors and world.table() == [(10, "dispatching")]
    assert len(world.ledger.sessions()) == 1  # the first one; the second was never written
    world.clock.advance(REDRIVE_AFTER_S + 1)
    beat.tick()
    assert world.table()[0] == (10, "dispatched")
    assert "undelivered" not in world.fires()[0].detail
    sessions = world.ledger.sessions()
    assert sorted(s.workspace for s in sessions if s.batch_id == world.fires()[0].batch_id) == [
        "/r1",
        "/r2",
    ]
    keys = [s.idempotency_key for s in sessions]
    assert len(keys) == len(set(keys))
    assert len(world.queue.published) == 2


def _ledger_down(*_a: object, **_k: object) -> None:
    raise LedgerUnavailableError("ledger unavailable (test)")


def test_a_fire_that_cannot_be_dispatched_ends_failed_after_bounded_attempts() -> None:
    world = World()
    world.add(every_s=3600)

    def down(*_a: object, **_k: object) -> None:
        raise LedgerUnavailableError("ledger unavailable (test)")

    world.ledger.get_batch = down  # type: ignore[method-assign]
    beat = world.scheduler()
    world.move_to(3600.5)
    beat.tick()
    for _ in range(MAX_DISPATCH_ATTEMPTS + 2):
        world.clock.advance(REDRIVE_AFTER_S + 1)
        beat.tick()
    (fire,) = world.fires()
    assert fire.outcome is FireOutcome.FAILED
    assert fire.attempts == MAX_DISPATCH_ATTEMPTS
    assert "LedgerUnavailableError" in fire.detail["error"]
    assert world.outcomes == [("s", FireOutcome.FAILED)]


def test_a_removed_schedules_stuck_fire_is_recorded_failed_not_dispatched() -> None:
    """A fire left `dispatching` (ledger down), then its schedule removed: no re-drive."""
    world = World()
    world.add(every_s=3600)
    opened = world.ledger.open_session
    calls = iter([opened, _ledger_down])
    world.ledger.open_session = lambda *a, **k: next(calls, opened)(*a, **k)
    world.move_to(3600.5)
    world.scheduler().tick()
    assert world.table() == [(3600, "dispatching")]
    published = len(world.queue.published)
    world.store.remove("s", at=world.clock.now())
    world.clock.advance(REDRIVE_AFTER_S + 1)
    report = world.scheduler().tick()
    (fire,) = world.store.fires("id-s")  # removed: world.fires() looks up live names
    assert fire.outcome is FireOutcome.FAILED
    assert fire.detail["error"] == REMOVED_ERROR
    assert len(world.queue.published) == published  # nothing more was sent
    assert len(world.ledger.sessions()) == 1  # the one written before the ledger failed
    assert [f.fire_time for f in report.failed] == [world.at(3600)]
    assert world.outcomes == [("s", FireOutcome.FAILED)]


def test_a_removed_schedules_buffered_fire_is_recorded_failed_not_released() -> None:
    world = World()
    world.add(overlap=Overlap.BUFFER_ONE)
    beat = world.scheduler()
    world.move_to(10.5)
    beat.tick()
    world.move_to(20.5)
    beat.tick()
    assert world.table() == [(10, "dispatched"), (20, "buffered")]
    world.store.remove("s", at=world.clock.now())
    world.finish(fire_batch_id("id-s", world.at(10)))
    world.move_to(21)
    beat.tick()
    world.clock.advance(REDRIVE_AFTER_S + 1)
    beat.tick()
    outcomes = sorted((f.fire_time, f.outcome) for f in world.store.fires("id-s"))
    assert outcomes == [
        (world.at(10), FireOutcome.DISPATCHED),
        (world.at(20), FireOutcome.FAILED),
    ]
    assert world.store.get_fire("id-s", world.at(20)).detail["error"] == REMOVED_ERROR  # type: ignore[union-attr]
    assert world.running_batches() == set()
    assert len(world.ledger.batches()) == 1


def test_a_job_that_no_longer_validates_fails_at_once() -> None:
    world = World()
    world.add()
    schedule = world.store.get("s")
    assert schedule is not None
    broken = schedule.definition.model_copy(update={"job": {**JOB, "limits": {"max_steps": 0}}})
    world.store.put(broken, schedule_id="unused", at=world.clock.now())
    world.move_to(10.5)
    world.scheduler().tick()
    (fire,) = world.fires()
    assert fire.outcome is FireOutcome.FAILED and "invalid job" in fire.detail["error"]
    assert world.ledger.batches() == []


def test_pause_stops_fires_and_resume_does_not_run_the_paused_ones() -> None:
    world = World()
    world.add(overlap=Overlap.ALLOW, catchup_window_s=3600)
    tick_every_second(world, 10.5)
    world.store.set_paused("s", True, at=world.clock.now())
    tick_every_second(world, 40.5)
    assert world.table() == [(10, "dispatched")]
    world.store.set_paused("s", False, at=world.clock.now())
    tick_every_second(world, 50.5)
    assert world.table() == [(10, "dispatched"), (50, "dispatched")]


def test_editing_the_trigger_neither_runs_nor_misses_the_new_triggers_past_fires() -> None:
    world = World()
    world.add(cron="0 3 * * *", every_s=None, repos=("/r1",))
    world.move_to(3 * 3600 + 0.5)
    world.scheduler().tick()
    assert world.table() == [(3 * 3600, "dispatched")]
    world.move_to(15 * 3600)  # the nightly schedule becomes an every-minute one
    definition = world.store.get("s").definition.model_copy(  # type: ignore[union-attr]
        update={"cron": None, "every_s": 60.0, "overlap": Overlap.ALLOW}
    )
    world.store.put(definition, schedule_id="id-s", at=world.clock.now())
    world.move_to(15 * 3600 + 60.5)
    world.scheduler().tick()
    assert world.table() == [(3 * 3600, "dispatched"), (15 * 3600 + 60, "dispatched")]


def test_a_schedule_whose_planning_raises_does_not_stop_the_others() -> None:
    world = World()
    good = world.add("good")
    broken = good.definition.model_construct(  # stored before validation refused it
        **{**dict(good.definition), "name": "broken", "catchup_window_s": float("inf")}
    )
    world.store.put(broken, schedule_id="id-broken", at=world.clock.now())
    world.move_to(10.5)
    report = world.scheduler().tick()
    assert world.table("good") == [(10, "dispatched")]
    assert world.table("broken") == []
    assert [e.split(":")[0] for e in report.errors] == ["broken"]


def test_trigger_fires_now_and_a_removed_schedule_never_fires() -> None:
    world = World()
    world.add(every_s=3600)
    world.move_to(5.25)
    fire = world.scheduler().trigger("s")
    assert fire.kind is FireKind.MANUAL and fire.outcome is FireOutcome.DISPATCHED
    assert fire.fire_time == world.at(5.25)
    assert len(world.ledger.sessions(batch_id=fire.batch_id)) == 2
    world.store.remove("s", at=world.clock.now())
    world.move_to(3600.5)
    world.scheduler().tick()
    assert world.ledger.batches()[0].batch_id == fire.batch_id and len(world.ledger.batches()) == 1


def test_a_trigger_at_a_scheduled_fire_time_leaves_the_scheduled_fire_to_the_tick() -> None:
    """Trigger at t = 10.000 (a fire time of every 10 s), then tick: both fires run."""
    world = World()
    world.add(overlap=Overlap.ALLOW)
    world.move_to(10)
    manual = world.scheduler().trigger("s")
    assert manual.kind is FireKind.MANUAL and manual.outcome is FireOutcome.DISPATCHED
    world.move_to(10.5)
    world.scheduler().tick()
    scheduled = world.store.get_fire("id-s", world.at(10))
    assert scheduled is not None and scheduled.kind is FireKind.SCHEDULED
    assert scheduled.outcome is FireOutcome.DISPATCHED
    assert {b.batch_id for b in world.ledger.batches()} == {manual.batch_id, scheduled.batch_id}
    assert len(world.ledger.sessions()) == 4  # two repositories, two fires
    # the other order: the tick decided t = 20 first, a trigger at 20.000 is still its own fire
    world.move_to(20)
    world.scheduler().tick()
    again = world.scheduler().trigger("s")
    assert again.kind is FireKind.MANUAL and again.fire_time == world.at(20.001)
    assert len(world.ledger.batches()) == 4


def test_the_batch_report_of_a_fire_names_its_schedule_and_fire_time() -> None:
    from nahida_workers.cli.report import batch_report

    world = World()
    world.add()
    world.move_to(10.2)
    world.scheduler().tick()
    (batch,) = world.ledger.batches()
    report = batch_report(world.ledger, batch.batch_id)
    assert report["schedule"]["name"] == "s"
    assert report["schedule"]["fire_time"] == "2026-01-01T00:00:10.000Z"
    assert len(report["sessions"]) == 2
