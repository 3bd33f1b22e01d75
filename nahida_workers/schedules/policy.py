"""What a tick decides for one schedule: pure, ``now`` and the running fires as arguments.

:func:`plan_tick` walks the fire times after the schedule's cursor, oldest
first, and decides each one (DESIGN.md section 8, after Temporal's schedules):

* not yet due (its jittered due time is after ``now``) -> stop; later ticks go on;
* later than ``catchup_window_s`` -> ``missed`` (beat was down too long);
* else the overlap policy, against the fires whose sessions still run:
  ``skip`` -> ``skipped_overlap``; ``buffer_one`` -> ``buffered`` (one at most;
  a second is skipped), released when nothing runs any more; ``allow`` ->
  dispatched; ``cancel_previous`` -> the running fires are cancelled and this
  one dispatched.

Catch-up fires (due while beat was down, inside the window) are decided the
same way, oldest first: with ``allow`` each runs once; with ``skip`` the
oldest runs and the rest overlap it.  A long outage is bounded: at most
:data:`MISSED_ROWS_MAX` missed fires are listed one by one (the newest; the
first listed says earlier ones were not), and at most
:data:`MAX_FIRES_PER_TICK` fires are decided per tick.

The runtime commits the :class:`Plan` with a compare-and-set on the
schedule's version and performs it only if the commit won.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nahida_workers.schedules.model import FireKind, FireOutcome, Overlap, Schedule
from nahida_workers.schedules.timing import fire_times, iso, jitter_offset, previous_fire

__all__ = [
    "MAX_FIRES_PER_TICK",
    "MISSED_ROWS_MAX",
    "FireDecision",
    "Plan",
    "fire_batch_id",
    "plan_tick",
    "plan_trigger",
    "session_key",
]

#: Fires decided for one schedule in one tick; the rest wait for the next tick.
MAX_FIRES_PER_TICK = 100
#: Missed fires (beyond the catch-up window) listed one row each, newest kept.
MISSED_ROWS_MAX = 100

_MS = timedelta(milliseconds=1)


def fire_batch_id(schedule_id: str, fire_time: datetime) -> str:
    """The fire's batch id: 32 hex of sha256(schedule id, fire time) -- same on every beat."""
    return hashlib.sha256(f"batch:{schedule_id}:{iso(fire_time)}".encode()).hexdigest()[:32]


def session_key(schedule_id: str, fire_time: datetime, repo: str) -> str:
    """Idempotency key of a fire's session: schedule id + fire time + repository.

    The repository enters as 16 hex of its sha256, so the key stays short
    (the column holds 300 characters) whatever the path.
    """
    repo_digest = hashlib.sha256(repo.encode()).hexdigest()[:16]
    return f"schedule:{schedule_id}:{iso(fire_time)}:{repo_digest}"


@dataclass(frozen=True)
class FireDecision:
    """One fire time decided: the row the ledger will hold for it."""

    fire_time: datetime
    due_at: datetime
    outcome: FireOutcome
    kind: FireKind = FireKind.SCHEDULED
    batch_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """Everything one tick decided for one schedule.

    Attributes:
        decisions: new fire rows, oldest first.
        release: a buffered fire time to dispatch now (nothing runs any more).
        cancel: running fire times whose sessions ``cancel_previous`` stops.
        cursor: the schedule's new cursor.
    """

    decisions: tuple[FireDecision, ...] = ()
    release: datetime | None = None
    cancel: tuple[datetime, ...] = ()
    cursor: datetime | None = None

    @property
    def empty(self) -> bool:
        """Nothing to commit."""
        return not self.decisions and self.release is None and self.cursor is None


class _Running:
    """The overlap state while a plan is built: running and buffered fire times."""

    def __init__(self, active: Sequence[datetime], buffered: Sequence[datetime]) -> None:
        self.active = sorted(active)
        self.buffered = sorted(buffered)
        self.cancel: list[datetime] = []
        self.release: datetime | None = None

    def release_buffer(self) -> None:
        if not self.active and self.buffered:
            self.release = self.buffered.pop(0)
            self.active.append(self.release)

    def decide(self, schedule: Schedule, fire_time: datetime) -> tuple[FireOutcome, dict[str, Any]]:
        overlap = schedule.definition.overlap
        if not self.active or overlap is Overlap.ALLOW:
            self.active.append(fire_time)
            return FireOutcome.DISPATCHING, {}
        running = [iso(t) for t in self.active]
        if overlap is Overlap.SKIP:
            return FireOutcome.SKIPPED_OVERLAP, {"running": running}
        if overlap is Overlap.BUFFER_ONE:
            if self.buffered:
                return FireOutcome.SKIPPED_OVERLAP, {"running": running, "buffer_full": True}
            self.buffered.append(fire_time)
            return FireOutcome.BUFFERED, {"running": running}
        # cancel_previous: every running fire is cancelled; this one runs alone
        self.cancel.extend(self.active)
        self.active = [fire_time]
        return FireOutcome.DISPATCHING, {"cancelled": running}


def _decision(
    schedule: Schedule, fire_time: datetime, outcome: FireOutcome, detail: dict[str, Any], **kw: Any
) -> FireDecision:
    due = fire_time
    if kw.get("kind", FireKind.SCHEDULED) is FireKind.SCHEDULED:
        due += jitter_offset(schedule.schedule_id, fire_time, schedule.definition.jitter_s)
    batch = None
    if outcome in (FireOutcome.DISPATCHING, FireOutcome.BUFFERED):
        batch = fire_batch_id(schedule.schedule_id, fire_time)
    return FireDecision(fire_time, due, outcome, batch_id=batch, detail=detail, **kw)


def _missed_beyond_window(
    schedule: Schedule, now: datetime
) -> tuple[list[FireDecision], datetime | None]:
    """Fires certainly outside the window (whatever their jitter), newest kept."""
    definition = schedule.definition
    horizon = now - timedelta(seconds=definition.catchup_window_s + definition.jitter_s)
    if horizon <= schedule.cursor:
        return [], None
    times: list[datetime] = []
    before = horizon
    while len(times) <= MISSED_ROWS_MAX:
        instant = previous_fire(definition, before)
        if instant <= schedule.cursor:
            break
        times.append(instant)
        before = instant
    if not times:
        return [], None
    more = len(times) > MISSED_ROWS_MAX
    times = sorted(times[:MISSED_ROWS_MAX])
    decisions = []
    for i, fire_time in enumerate(times):
        detail: dict[str, Any] = {"late_s": round((now - fire_time).total_seconds(), 3)}
        if i == 0 and more:
            detail["earlier_missed_not_listed_since"] = iso(schedule.cursor)
        decisions.append(_decision(schedule, fire_time, FireOutcome.MISSED, detail))
    return decisions, times[-1]


def plan_tick(
    schedule: Schedule,
    *,
    now: datetime,
    active: Sequence[datetime] = (),
    buffered: Sequence[datetime] = (),
) -> Plan:
    """Decide the due fires of ``schedule`` at ``now``.

    Args:
        schedule: the row as read (its ``cursor`` and definition).
        now: the tick's time (UTC, aware).
        active: fire times whose sessions may still run (claimed or dispatched, unfinished).
        buffered: fire times waiting under ``buffer_one``.

    Returns:
        The plan; ``Plan.empty`` when there is nothing to commit.  A paused
        schedule decides nothing (its cursor stays; ``resume`` moves it).
    """
    if schedule.paused:
        return Plan()
    definition = schedule.definition
    running = _Running(active, buffered)
    running.release_buffer()
    decisions, cursor = _missed_beyond_window(schedule, now)
    start = cursor or schedule.cursor
    for fire_time in fire_times(definition, start, now, limit=MAX_FIRES_PER_TICK):
        due = fire_time + jitter_offset(schedule.schedule_id, fire_time, definition.jitter_s)
        if due > now:
            break
        cursor = fire_time
        late_s = (now - due).total_seconds()
        detail: dict[str, Any]
        if late_s > definition.catchup_window_s:
            outcome, detail = FireOutcome.MISSED, {}
        else:
            outcome, detail = running.decide(schedule, fire_time)
        detail = {"late_s": round(late_s, 3), **detail}
        decisions.append(_decision(schedule, fire_time, outcome, detail))
    return Plan(tuple(decisions), running.release, tuple(running.cancel), cursor)


def plan_trigger(
    schedule: Schedule,
    *,
    now: datetime,
    active: Sequence[datetime] = (),
    buffered: Sequence[datetime] = (),
) -> Plan:
    """A manual fire at ``now`` (``nahida schedule trigger``), under the overlap policy.

    Allowed while paused (as Temporal's trigger is); the cursor does not move.

    Manual fires never take a scheduled fire time: a fire row, its batch id
    and its session keys are keyed by (schedule id, fire time), so a trigger
    landing on the very millisecond of a scheduled fire would decide that
    fire time for the schedule and the scheduled fire would never run or be
    recorded.  Such a trigger takes the next millisecond instead (scheduled
    fire times are at least a second apart, so that one is always free).
    """
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # ids carry milliseconds
    while fire_times(schedule.definition, now - _MS, now, limit=1):
        now += _MS
    running = _Running(active, buffered)
    running.release_buffer()
    outcome, detail = running.decide(schedule, now)
    decision = _decision(schedule, now, outcome, detail, kind=FireKind.MANUAL)
    return Plan((decision,), running.release, tuple(running.cancel), None)
