"""Next-fire computation across DST changes and time zones (issue 14, pure).

Cron fields match wall-clock time in the schedule's zone, with Vixie
cron / cronie's DST rules: a fixed-time job (minute and hour fields not
starting with ``*``) whose wall time does not exist (spring forward) fires
once at the end of the gap, and one whose wall time occurs twice (fall back)
fires once, at its first occurrence; a wildcard job (``*/15 * * * *``,
``0 * * * *``) fires at every matching instant that exists: both passes of
a repeated hour, none of a skipped one.  Intervals are absolute (multiples
since the Unix epoch) and DST-blind.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.schedules.model import ScheduleDef, parse_duration
from nahida_workers.schedules.timing import (
    fire_times,
    iso,
    jitter_offset,
    next_fire,
    previous_fire,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SYDNEY = ZoneInfo("Australia/Sydney")


def cron(expr: str, tz: str = "UTC") -> ScheduleDef:
    return ScheduleDef(name="t", job={}, repos=("/r",), cron=expr, timezone=tz)


def every(seconds: float) -> ScheduleDef:
    return ScheduleDef(name="t", job={}, repos=("/r",), every_s=seconds)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold)


def day_fires(definition: ScheduleDef, zone: ZoneInfo, y: int, m: int, d: int) -> list[datetime]:
    """Fires during the local calendar day, as local times."""
    start = datetime(y, m, d, tzinfo=zone)
    end = start + timedelta(days=1)
    found = fire_times(definition, start - timedelta(microseconds=1), end, limit=1000)
    return [f.astimezone(zone) for f in found if f < end.astimezone(UTC)]


# -- Europe/Berlin ------------------------------------------------------------------


def test_berlin_spring_forward_0230_fires_once_at_the_end_of_the_gap() -> None:
    """2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist."""
    nightly = cron("30 2 * * *", "Europe/Berlin")
    fires = day_fires(nightly, BERLIN, 2026, 3, 29)
    assert fires == [local(BERLIN, 2026, 3, 29, 3, 0)]
    assert fires[0].astimezone(UTC) == utc(2026, 3, 29, 1, 0)
    # the days around it are ordinary
    assert day_fires(nightly, BERLIN, 2026, 3, 28) == [local(BERLIN, 2026, 3, 28, 2, 30)]
    assert day_fires(nightly, BERLIN, 2026, 3, 30) == [local(BERLIN, 2026, 3, 30, 2, 30)]
    assert next_fire(nightly, utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1, 0)
    assert next_fire(nightly, utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 30)


def test_berlin_fall_back_0230_fires_once_at_its_first_occurrence() -> None:
    """2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice."""
    nightly = cron("30 2 * * *", "Europe/Berlin")
    fires = day_fires(nightly, BERLIN, 2026, 10, 25)
    assert len(fires) == 1
    assert fires[0].astimezone(UTC) == utc(2026, 10, 25, 0, 30)  # 02:30 CEST
    # asking from between the two occurrences skips the second one
    between = utc(2026, 10, 25, 0, 45)
    assert next_fire(nightly, between) == utc(2026, 10, 26, 1, 30)  # 02:30 CET next day
    assert next_fire(nightly, utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 26, 1, 30)


def test_berlin_hourly_on_both_dst_days() -> None:
    hourly = cron("0 * * * *", "Europe/Berlin")
    spring = day_fires(hourly, BERLIN, 2026, 3, 29)
    assert len(spring) == 23  # a 23-hour day, no 02:00
    assert [f.hour for f in spring[:3]] == [0, 1, 3]
    autumn = day_fires(hourly, BERLIN, 2026, 10, 25)
    assert len(autumn) == 25  # a 25-hour day: wildcard hour, 02:00 fires in both passes
    assert [f.hour for f in autumn[:5]] == [0, 1, 2, 2, 3]
    assert [f.astimezone(UTC) for f in autumn[2:4]] == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1)]
    utcs = [f.astimezone(UTC) for f in spring + autumn]
    assert utcs == sorted(set(utcs)), "fire times strictly increase"
    assert all((b - a) == timedelta(hours=1) for a, b in itertools.pairwise(utcs[23:]))


def test_berlin_quarter_hours_fire_through_the_repeated_hour() -> None:
    """`*/15 * * * *` on 2026-10-25: every 15 minutes in UTC, 02:00-02:45 twice."""
    quarterly = cron("*/15 * * * *", "Europe/Berlin")
    fires = [f.astimezone(UTC) for f in day_fires(quarterly, BERLIN, 2026, 10, 25)]
    assert len(fires) == 25 * 4
    assert all((b - a) == timedelta(minutes=15) for a, b in itertools.pairwise(fires))
    assert utc(2026, 10, 25, 1, 0) in fires  # 02:00 CET, the second pass
    assert next_fire(quarterly, utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 25, 1, 0)
    assert previous_fire(quarterly, utc(2026, 10, 25, 2, 0)) == utc(2026, 10, 25, 1, 45)


def test_fixed_hour_jobs_stay_once_and_wildcard_minute_jobs_follow_cronie() -> None:
    """cronie's split: a range/list hour is fixed, a `*` minute makes a wildcard job."""
    sundays = cron("0 1-3 * * 0", "Europe/Berlin")
    autumn = [f.astimezone(UTC) for f in day_fires(sundays, BERLIN, 2026, 10, 25)]
    assert autumn == [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2)]
    spring = [f.astimezone(UTC) for f in day_fires(sundays, BERLIN, 2026, 3, 29)]
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1)]  # 02:00 -> 03:00, once
    in_two = cron("*/15 2 * * *", "Europe/Berlin")
    assert len(day_fires(in_two, BERLIN, 2026, 10, 25)) == 8  # both passes
    assert day_fires(in_two, BERLIN, 2026, 3, 29) == []  # no 02:xx exists that day


def test_berlin_quarter_hours_in_the_gap_collapse_to_one_fire() -> None:
    quarterly = cron("*/15 * * * *", "Europe/Berlin")
    fires = [f.astimezone(UTC) for f in day_fires(quarterly, BERLIN, 2026, 3, 29)]
    assert len(fires) == 23 * 4
    assert utc(2026, 3, 29, 1, 0) in fires  # 03:00 CEST, once
    assert fires == sorted(set(fires))


# -- America/New_York ----------------------------------------------------------------


def test_new_york_spring_forward_and_fall_back() -> None:
    nightly = cron("30 2 * * *", "America/New_York")
    # 2026-03-08: 02:00 EST -> 03:00 EDT
    assert day_fires(nightly, NEW_YORK, 2026, 3, 8) == [local(NEW_YORK, 2026, 3, 8, 3, 0)]
    # 2026-11-01: 02:00 EDT -> 01:00 EST; 02:30 exists once (EST)
    assert [f.astimezone(UTC) for f in day_fires(nightly, NEW_YORK, 2026, 11, 1)] == [
        utc(2026, 11, 1, 7, 30)
    ]
    early = cron("30 1 * * *", "America/New_York")
    # 01:30 happens twice, fires once (EDT)
    fires = day_fires(early, NEW_YORK, 2026, 11, 1)
    assert [f.astimezone(UTC) for f in fires] == [utc(2026, 11, 1, 5, 30)]
    assert next_fire(early, utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 2, 6, 30)


def test_new_york_hourly_runs_both_passes_of_the_repeated_hour() -> None:
    hourly = cron("0 * * * *", "America/New_York")
    autumn = [f.astimezone(UTC) for f in day_fires(hourly, NEW_YORK, 2026, 11, 1)]
    assert len(autumn) == 25
    assert utc(2026, 11, 1, 6) in autumn  # 01:00 EST, the second 01:00
    assert all((b - a) == timedelta(hours=1) for a, b in itertools.pairwise(autumn))
    assert len(day_fires(hourly, NEW_YORK, 2026, 3, 8)) == 23


# -- Australia/Sydney (southern hemisphere: DST ends in April, starts in October) -------


def test_sydney_fixed_and_wildcard_jobs_on_both_dst_days() -> None:
    """2026-04-05 03:00 AEDT -> 02:00 AEST (fall back); 2026-10-04 02:00 -> 03:00 (forward)."""
    nightly = cron("30 2 * * *", "Australia/Sydney")
    autumn = [f.astimezone(UTC) for f in day_fires(nightly, SYDNEY, 2026, 4, 5)]
    assert autumn == [utc(2026, 4, 4, 15, 30)]  # 02:30 AEDT, the first pass only
    spring = day_fires(nightly, SYDNEY, 2026, 10, 4)
    assert spring == [local(SYDNEY, 2026, 10, 4, 3, 0)]  # right after the gap
    assert spring[0].astimezone(UTC) == utc(2026, 10, 3, 16, 0)
    quarterly = cron("*/15 * * * *", "Australia/Sydney")
    long_day = [f.astimezone(UTC) for f in day_fires(quarterly, SYDNEY, 2026, 4, 5)]
    assert len(long_day) == 25 * 4
    assert all((b - a) == timedelta(minutes=15) for a, b in itertools.pairwise(long_day))
    short_day = [f.astimezone(UTC) for f in day_fires(quarterly, SYDNEY, 2026, 10, 4)]
    assert len(short_day) == 23 * 4
    assert short_day == sorted(set(short_day))


@pytest.mark.parametrize(
    ("tz", "expected_utc_hour", "expected_utc_minute"),
    [("UTC", 3, 0), ("Asia/Kolkata", 21, 30), ("America/New_York", 8, 0), ("Europe/Berlin", 2, 0)],
)
def test_the_same_cron_in_different_zones(
    tz: str, expected_utc_hour: int, expected_utc_minute: int
) -> None:
    """`0 3 * * *` on 2026-01-15 local: the zone decides the instant."""
    definition = cron("0 3 * * *", tz)
    fire = next_fire(definition, utc(2026, 1, 14, 12))
    assert fire.tzinfo is not None
    assert fire.astimezone(ZoneInfo(tz)).hour == 3
    assert (fire.hour, fire.minute) == (expected_utc_hour, expected_utc_minute)


def test_previous_fire_mirrors_next_fire_across_dst() -> None:
    nightly = cron("30 2 * * *", "Europe/Berlin")
    assert previous_fire(nightly, utc(2026, 3, 30, 12)) == utc(2026, 3, 30, 0, 30)
    assert previous_fire(nightly, utc(2026, 3, 30, 0, 30)) == utc(2026, 3, 29, 1, 0)
    assert previous_fire(nightly, utc(2026, 10, 26, 0)) == utc(2026, 10, 25, 0, 30)


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1)),
    st.sampled_from(
        [
            "30 2 * * *",
            "0 * * * *",
            "*/15 * * * *",
            "0 1-3 * * 0",
            "45 23 28-31 * *",
            "*/20 2 * * *",
        ]
    ),
    st.sampled_from(
        ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Australia/Sydney", "UTC"]
    ),
)
def test_next_and_previous_are_consistent(start: datetime, expr: str, tz: str) -> None:
    """next(t) > t, previous(next(t)) < next(t), no fire between t and next(t)."""
    definition = cron(expr, tz)
    after = start.replace(tzinfo=UTC)
    nxt = next_fire(definition, after)
    assert nxt > after
    assert fire_times(definition, after, nxt, limit=10) == [nxt]
    assert previous_fire(definition, nxt) <= after
    assert next_fire(definition, previous_fire(definition, nxt)) == nxt


# -- intervals ----------------------------------------------------------------------


def test_interval_fires_at_multiples_since_the_epoch_whatever_the_zone() -> None:
    two = every(2)
    assert next_fire(two, utc(2026, 1, 1, 0, 0, 0)) == utc(2026, 1, 1, 0, 0, 2)
    assert next_fire(two, utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 0, 2)
    assert previous_fire(two, utc(2026, 1, 1, 0, 0, 2)) == utc(2026, 1, 1, 0, 0, 0)
    fires = fire_times(two, utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 10), limit=100)
    assert [f.second for f in fires] == [2, 4, 6, 8, 10]
    # across the Berlin DST change an hourly interval stays 3600 s apart
    hourly = every(3600)
    across = fire_times(hourly, utc(2026, 3, 28, 23), utc(2026, 3, 29, 4), limit=10)
    assert all((b - a).total_seconds() == 3600 for a, b in itertools.pairwise(across))


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (utc(2026, 10, 24, 22), utc(2026, 10, 25, 4)),  # Berlin fall back
        (utc(2026, 11, 1, 3), utc(2026, 11, 1, 9)),  # New York fall back
        (utc(2026, 10, 3, 14), utc(2026, 10, 3, 18)),  # Sydney spring forward
    ],
)
def test_intervals_are_pure_utc_durations_across_dst(start: datetime, end: datetime) -> None:
    """`every 15m` is 15 minutes of elapsed time whatever the zone's clocks do."""
    quarter = every(900)
    fires = fire_times(quarter, start, end, limit=100)
    assert len(fires) == (end - start) // timedelta(minutes=15)
    assert all((b - a) == timedelta(minutes=15) for a, b in itertools.pairwise(fires))


def test_fire_times_respects_its_limit_and_bounds() -> None:
    minute = cron("* * * * *")
    fires = fire_times(minute, utc(2026, 1, 1), utc(2026, 1, 2), limit=5)
    assert fires == [utc(2026, 1, 1, 0, m) for m in range(1, 6)]
    assert fire_times(minute, utc(2026, 1, 1, 0, 0, 30), utc(2026, 1, 1, 0, 0, 59), limit=5) == []
    assert fire_times(minute, utc(2026, 1, 1, 0, 0, 0, 500), utc(2026, 1, 1, 0, 1), limit=5) == [
        utc(2026, 1, 1, 0, 1)
    ]


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire(every(2), datetime(2026, 1, 1))


# -- jitter, iso, durations ----------------------------------------------------------


def test_jitter_is_deterministic_bounded_and_varies() -> None:
    fire = utc(2026, 1, 1, 3)
    a = jitter_offset("sched-1", fire, 30)
    assert a == jitter_offset("sched-1", fire, 30)  # two beats agree
    assert timedelta(0) <= a < timedelta(seconds=30)
    offsets = {jitter_offset("sched-1", fire + timedelta(days=d), 30) for d in range(20)}
    assert len(offsets) > 10
    assert jitter_offset("sched-1", fire, 0) == timedelta(0)


def test_iso_is_utc_with_milliseconds() -> None:
    berlin = datetime(2026, 3, 29, 3, 0, 0, 123456, tzinfo=BERLIN)
    assert iso(berlin) == "2026-03-29T01:00:00.123Z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("500ms", 0.5), (7, 7)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "h", "1h 2", "-5s", "5 minutes"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"cron": "0 3 * * * *"}, "invalid cron"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 3 * * *", "every_s": 5}, "exactly one"),
        ({}, "exactly one"),
        ({"every_s": 0.5}, "greater than or equal"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "0 0 31 4 *"}, "never fires"),
        ({"every_s": float("inf")}, "less than or equal"),
        ({"every_s": 60, "catchup_window_s": float("inf")}, "less than or equal"),
        ({"every_s": 60, "jitter_s": 1e30}, "less than or equal"),
    ],
)
def test_invalid_definitions_name_the_problem(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScheduleDef(name="t", job={}, repos=("/r",), **fields)
