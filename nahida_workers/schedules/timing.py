"""When a schedule fires: pure functions of the definition and instants (sans-IO).

Cron expressions are matched by croniter against wall-clock time in the
schedule's time zone (zoneinfo).  DST days follow Vixie cron / cronie, which
sort jobs into *wildcard* jobs (minute or hour field starting with ``*``:
``*/15 * * * *``, ``0 * * * *``, ``* 2 * * *``) and *fixed-time* jobs (every
other expression, ranges and lists included: ``30 2 * * *``, ``0 1-3 * * 0``):

* fall back (02:00-03:00 Europe/Berlin happens twice on the last Sunday of
  October): a wildcard job fires at every matching instant, in both passes
  (``*/15 * * * *`` fires eight times between 02:00 CEST and 02:45 CET, every
  15 minutes in UTC); a fixed-time job fires once, at the first pass (02:30
  CEST), so a nightly job never runs twice in one night;
* spring forward (02:00-03:00 does not exist on the last Sunday of March): a
  fixed-time job whose wall time falls in the gap fires once, at the first
  instant after it (``30 2 * * *`` at 03:00 CEST) -- croniter's own
  behaviour, as cronie runs skipped fixed-time jobs right after the jump; a
  wildcard job's nonexistent wall times are skipped (``*/15 2 * * *`` does not
  fire that day), so wildcard jobs fire only at real matching instants.

Intervals (``every``) are absolute: fires at whole multiples of the interval
since the Unix epoch (UTC), so every beat and every restart agrees on them
and DST does not touch them.

Nothing here reads the clock: ``now`` and every instant are arguments.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from nahida_workers.schedules.model import ScheduleDef

__all__ = [
    "fire_times",
    "iso",
    "jitter_offset",
    "next_fire",
    "previous_fire",
    "shortest_period",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Where :func:`shortest_period` samples a cron expression (a leap year follows).
_SAMPLE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
_SAMPLE_FIRES = 512
_SAMPLE_SPAN = timedelta(days=800)


def iso(instant: datetime) -> str:
    """``2026-03-29T01:00:00.000Z``: the canonical UTC text of a fire time (keys, ids)."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{instant.microsecond // 1000:03d}Z"
    )


def _aware(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    return instant.astimezone(UTC)


def _second_occurrence(local: datetime, zone: ZoneInfo) -> bool:
    """True for the later of two instants sharing one wall time (fall back)."""
    first = local.replace(tzinfo=None).replace(tzinfo=zone, fold=0)
    return first.utcoffset() != local.utcoffset()


def _is_wildcard(expression: str) -> bool:
    """As cronie's ``MIN_STAR|HR_STAR``: the minute or the hour field starts with ``*``."""
    minute, hour = expression.split(" ")[:2]
    return minute.startswith("*") or hour.startswith("*")


def _keep(expression: str, wildcard: bool, local: datetime, zone: ZoneInfo) -> bool:
    """Whether a wall time croniter yields is a fire under the DST rules above."""
    if not wildcard:
        return not _second_occurrence(local, zone)
    # croniter moves a nonexistent wall time to the end of the gap; such a
    # stand-in no longer matches the expression and is dropped for wildcard jobs
    return bool(croniter.match(expression, local.replace(tzinfo=None)))


def _cron_iter(definition: ScheduleDef, start: datetime, *, forward: bool) -> Iterator[datetime]:
    assert definition.cron is not None
    expression, zone = definition.cron, ZoneInfo(definition.timezone)
    wildcard = _is_wildcard(expression)
    it = croniter(expression, start.astimezone(zone))
    step = it.get_next if forward else it.get_prev
    last: datetime | None = None
    while True:
        local = step(datetime)
        if not _keep(expression, wildcard, local, zone):
            continue
        instant = local.astimezone(UTC)
        if instant == last:  # two wall times folded into one instant by a gap
            continue
        last = instant
        yield instant


def _every_ms(definition: ScheduleDef) -> int:
    assert definition.every_s is not None
    return max(1, round(definition.every_s * 1000))


def _ms(instant: datetime) -> int:
    delta = instant - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _at_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def next_fire(definition: ScheduleDef, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (UTC).

    Raises:
        ValueError: ``after`` is naive.
    """
    after = _aware(after)
    if definition.cron is not None:
        return next(_cron_iter(definition, after, forward=True))
    step = _every_ms(definition)
    return _at_ms((math.floor(_ms(after) / step) + 1) * step)


def previous_fire(definition: ScheduleDef, before: datetime) -> datetime:
    """The last fire time strictly before ``before`` (UTC)."""
    before = _aware(before)
    if definition.cron is not None:
        return next(_cron_iter(definition, before, forward=False))
    step = _every_ms(definition)
    return _at_ms((math.ceil(_ms(before) / step) - 1) * step)


def fire_times(
    definition: ScheduleDef, after: datetime, until: datetime, *, limit: int
) -> list[datetime]:
    """Fire times ``t`` with ``after < t <= until``, oldest first, at most ``limit``."""
    after, until = _aware(after), _aware(until)
    found: list[datetime] = []
    if definition.cron is not None:
        for instant in _cron_iter(definition, after, forward=True):
            if instant > until or len(found) >= limit:
                break
            if instant > after:
                found.append(instant)
        return found
    step = _every_ms(definition)
    k = math.floor(_ms(after) / step) + 1
    while len(found) < limit and (instant := _at_ms(k * step)) <= until:
        found.append(instant)
        k += 1
    return found


def shortest_period(definition: ScheduleDef) -> timedelta:
    """The shortest gap between two consecutive fires: the interval, or cron's nominal one.

    A cron expression is sampled in UTC (no DST) from 2000-01-01 for at most
    512 fires or 800 days, whichever ends first: ``*/15 * * * *`` -> 15 min,
    ``0 3 * * 1-5`` -> 1 day, ``0 0 1 1 *`` -> 365 days.
    """
    if definition.cron is None:
        return timedelta(milliseconds=_every_ms(definition))
    it = croniter(definition.cron, _SAMPLE_FROM)
    previous: datetime = it.get_next(datetime)
    shortest: timedelta | None = None
    for _ in range(_SAMPLE_FIRES):
        current: datetime = it.get_next(datetime)
        gap = current - previous
        shortest = gap if shortest is None else min(shortest, gap)
        if current - _SAMPLE_FROM > _SAMPLE_SPAN:
            break
        previous = current
    assert shortest is not None
    return shortest


def jitter_offset(schedule_id: str, fire_time: datetime, jitter_s: float) -> timedelta:
    """A delay in ``[0, jitter_s)`` from sha256(schedule id, fire time), in whole ms.

    Deterministic, so two beats (and a restarted one) compute the same due time.
    """
    if jitter_s <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}:{iso(fire_time)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=math.floor(fraction * jitter_s * 1000))
