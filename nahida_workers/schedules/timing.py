"""When a schedule fires: pure functions of the definition and instants (sans-IO).

Cron expressions are matched by croniter against wall-clock time in the
schedule's time zone (zoneinfo), with two rules for DST days:

* a wall time that does not exist (spring forward: 02:30 in Europe/Berlin on
  the last Sunday of March) fires once, at the first instant after the gap
  (03:00 local) -- croniter's own behaviour, as Vixie cron does it;
* a wall time that occurs twice (fall back: 02:30 on the last Sunday of
  October) fires once, at its first occurrence.  croniter yields both; the
  second is dropped here, so a nightly job never runs twice in one night.

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
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


def _cron_iter(definition: ScheduleDef, start: datetime, *, forward: bool) -> Iterator[datetime]:
    assert definition.cron is not None
    zone = ZoneInfo(definition.timezone)
    it = croniter(definition.cron, start.astimezone(zone))
    step = it.get_next if forward else it.get_prev
    last: datetime | None = None
    while True:
        local = step(datetime)
        if _second_occurrence(local, zone):
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


def jitter_offset(schedule_id: str, fire_time: datetime, jitter_s: float) -> timedelta:
    """A delay in ``[0, jitter_s)`` from sha256(schedule id, fire time), in whole ms.

    Deterministic, so two beats (and a restarted one) compute the same due time.
    """
    if jitter_s <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}:{iso(fire_time)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=math.floor(fraction * jitter_s * 1000))
