"""The pure planner: catch-up window, overlap policies, pause, jitter, bounds (issue 14 item 3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nahida_workers.schedules.model import FireKind, FireOutcome, Overlap, Schedule, ScheduleDef
from nahida_workers.schedules.policy import (
    MAX_FIRES_PER_TICK,
    MISSED_ROWS_MAX,
    fire_batch_id,
    plan_tick,
    plan_trigger,
    session_key,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def sched(
    *,
    every_s: float = 10,
    overlap: Overlap = Overlap.SKIP,
    window: float = 5,
    jitter: float = 0,
    cursor: datetime = T0,
    paused: bool = False,
) -> Schedule:
    definition = ScheduleDef(
        name="s",
        job={},
        repos=("/r",),
        every_s=every_s,
        overlap=overlap,
        catchup_window_s=window,
        jitter_s=jitter,
    )
    return Schedule(
        schedule_id="sid",
        definition=definition,
        cursor=cursor,
        created_at=T0,
        updated_at=T0,
        paused=paused,
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def outcomes(plan) -> list[tuple[float, str]]:  # type: ignore[no-untyped-def]
    return [((d.fire_time - T0).total_seconds(), d.outcome.value) for d in plan.decisions]


def test_nothing_due_is_an_empty_plan() -> None:
    plan = plan_tick(sched(), now=at(9.9))
    assert plan.empty and plan.cursor is None


def test_an_on_time_fire_is_dispatched_with_its_scheduled_time() -> None:
    plan = plan_tick(sched(), now=at(11.5))
    assert outcomes(plan) == [(10, "dispatching")]
    decision = plan.decisions[0]
    assert decision.fire_time == at(10)  # the scheduled time, not the tick's
    assert decision.detail["late_s"] == 1.5
    assert decision.batch_id == fire_batch_id("sid", at(10))
    assert plan.cursor == at(10)


def test_catch_up_inside_the_window_decides_each_missed_fire_once_oldest_first() -> None:
    """Beat down for three periods, back at 31 s with a 25 s window, allow: 10, 20, 30 run."""
    plan = plan_tick(sched(overlap=Overlap.ALLOW, window=25), now=at(31))
    assert outcomes(plan) == [(10, "dispatching"), (20, "dispatching"), (30, "dispatching")]
    assert plan.cursor == at(30)
    # the same plan again from the new cursor decides nothing
    again = sched(overlap=Overlap.ALLOW, window=25, cursor=plan.cursor)
    assert plan_tick(again, now=at(31)).empty


def test_catch_up_outside_the_window_records_missed() -> None:
    plan = plan_tick(sched(overlap=Overlap.ALLOW, window=5), now=at(31))
    assert outcomes(plan) == [(10, "missed"), (20, "missed"), (30, "dispatching")]


def test_catch_up_under_skip_runs_the_oldest_and_records_the_rest_skipped() -> None:
    plan = plan_tick(sched(overlap=Overlap.SKIP, window=25), now=at(31))
    assert outcomes(plan) == [(10, "dispatching"), (20, "skipped_overlap"), (30, "skipped_overlap")]


def test_skip_while_the_previous_fire_runs() -> None:
    plan = plan_tick(sched(cursor=at(10)), now=at(20.5), active=[at(10)])
    assert outcomes(plan) == [(20, "skipped_overlap")]
    assert plan.decisions[0].batch_id is None
    assert plan.decisions[0].detail["running"] == ["2026-01-01T00:00:10.000Z"]


def test_buffer_one_buffers_one_skips_the_next_and_releases_when_idle() -> None:
    s = sched(overlap=Overlap.BUFFER_ONE, cursor=at(10), window=25)
    plan = plan_tick(s, now=at(30.5), active=[at(10)])
    assert outcomes(plan) == [(20, "buffered"), (30, "skipped_overlap")]
    assert plan.decisions[0].batch_id == fire_batch_id("sid", at(20))
    # the running fire finished: the buffered one is released, the new one overlaps it
    s2 = sched(overlap=Overlap.BUFFER_ONE, cursor=at(30))
    plan2 = plan_tick(s2, now=at(40.5), active=[], buffered=[at(20)])
    assert plan2.release == at(20)
    assert outcomes(plan2) == [(40, "buffered")]


def test_allow_runs_alongside() -> None:
    plan = plan_tick(sched(overlap=Overlap.ALLOW, cursor=at(10)), now=at(20.5), active=[at(10)])
    assert outcomes(plan) == [(20, "dispatching")]
    assert plan.cancel == ()


def test_cancel_previous_cancels_every_running_fire() -> None:
    s = sched(overlap=Overlap.CANCEL_PREVIOUS, cursor=at(10))
    plan = plan_tick(s, now=at(20.5), active=[at(0), at(10)])
    assert outcomes(plan) == [(20, "dispatching")]
    assert plan.cancel == (at(0), at(10))
    assert plan.decisions[0].detail["cancelled"] == [
        "2026-01-01T00:00:00.000Z",
        "2026-01-01T00:00:10.000Z",
    ]


def test_paused_decides_nothing() -> None:
    assert plan_tick(sched(paused=True), now=at(100)).empty


def test_jitter_delays_the_due_time_not_the_fire_time() -> None:
    s = sched(jitter=9)
    plan = plan_tick(s, now=at(100))
    for d in plan.decisions:
        assert d.fire_time <= d.due_at < d.fire_time + timedelta(seconds=9)
    jittered = next(d for d in plan.decisions if d.due_at > d.fire_time)
    before = plan_tick(
        sched(jitter=9, cursor=jittered.fire_time - timedelta(seconds=10)),
        now=jittered.due_at - timedelta(milliseconds=1),
    )
    assert jittered.fire_time not in [d.fire_time for d in before.decisions]
    assert before.cursor is None or before.cursor < jittered.fire_time


def test_a_long_outage_is_bounded() -> None:
    """A day down on a 10 s schedule: at most MISSED_ROWS_MAX missed rows, newest kept."""
    plan = plan_tick(sched(window=25, overlap=Overlap.ALLOW), now=at(86400 + 1))
    missed = [d for d in plan.decisions if d.outcome is FireOutcome.MISSED]
    assert len(missed) == MISSED_ROWS_MAX
    assert "earlier_missed_not_listed_since" in missed[0].detail
    assert len(plan.decisions) <= MAX_FIRES_PER_TICK + MISSED_ROWS_MAX
    run = [d.fire_time for d in plan.decisions if d.outcome is FireOutcome.DISPATCHING]
    assert run == [at(86380), at(86390), at(86400)]
    assert plan.cursor == at(86400)
    times = [d.fire_time for d in plan.decisions]
    assert times == sorted(set(times))


def test_trigger_is_a_manual_fire_now_under_the_overlap_policy() -> None:
    now = at(12.3456789)
    plan = plan_trigger(sched(paused=True), now=now)
    (decision,) = plan.decisions
    assert decision.kind is FireKind.MANUAL
    assert decision.fire_time == at(12.345)  # milliseconds, like every id derived from it
    assert decision.due_at == decision.fire_time
    assert decision.outcome is FireOutcome.DISPATCHING
    assert plan.cursor is None
    skipped = plan_trigger(sched(), now=now, active=[at(10)])
    assert skipped.decisions[0].outcome is FireOutcome.SKIPPED_OVERLAP


def test_a_trigger_never_takes_a_scheduled_fire_time() -> None:
    """A trigger at the very millisecond of a fire time is a fire of its own, 1 ms later."""
    schedule = sched()  # every 10 s
    plan = plan_trigger(schedule, now=at(10.0004))
    (decision,) = plan.decisions
    assert decision.kind is FireKind.MANUAL
    assert decision.fire_time == at(10.001)
    assert decision.batch_id != fire_batch_id(schedule.schedule_id, at(10))
    assert plan_trigger(schedule, now=at(10.001)).decisions[0].fire_time == at(10.001)
    assert plan_trigger(schedule, now=at(9.999)).decisions[0].fire_time == at(9.999)


def test_keys_are_deterministic_and_distinct() -> None:
    assert fire_batch_id("a", at(10)) == fire_batch_id("a", at(10))
    assert fire_batch_id("a", at(10)) != fire_batch_id("a", at(20))
    assert fire_batch_id("a", at(10)) != fire_batch_id("b", at(10))
    key = session_key("a", at(10), "/very/long/" + "x" * 1000)
    assert len(key) < 100 and key.startswith("schedule:a:2026-01-01T00:00:10.000Z:")
    assert session_key("a", at(10), "/r1") != session_key("a", at(10), "/r2")
