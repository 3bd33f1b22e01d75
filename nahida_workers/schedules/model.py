"""Schedules as data (DESIGN.md section 8): definitions, rows, fires.

A :class:`ScheduleDef` is what a user declares (``nahida schedule add``, a
``config/schedules.yaml`` entry): a job snapshot, its repositories, a cron
expression or an interval, a time zone and the policies.  A :class:`Schedule`
is the ledger row holding it, with the state the ticks move (``cursor``: the
last scheduled fire time decided; ``version``: bumped by every change, the
compare-and-set token that lets exactly one tick decide).  A
:class:`FireRecord` is one decision about one scheduled fire time.

Plain values; no I/O.  Timestamps are timezone-aware UTC.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "NAME_PATTERN",
    "FireKind",
    "FireOutcome",
    "FireRecord",
    "Overlap",
    "Schedule",
    "ScheduleDef",
    "parse_duration",
]

#: Schedule names: what ``nahida schedule show NAME`` accepts.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"

#: The longest interval, jitter or catch-up window (10 years): beyond it the
#: fire-time arithmetic leaves datetime's range, and no schedule means it.
MAX_DURATION_S = 10 * 366 * 86400.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``"90"``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"2d"`` (or a number).

    Raises:
        ValueError: not a duration (the message quotes it).
    """
    if isinstance(text, int | float):
        value = float(text)
    else:
        compact = text.strip().lower().replace(" ", "")
        try:
            value = float(compact)
        except ValueError:
            parts = _DURATION.findall(compact)
            if not parts or "".join(n + u for n, u in parts) != compact:
                raise ValueError(
                    f"not a duration: {text!r} (use e.g. 90, 30s, 5m, 1h30m, 2d)"
                ) from None
            value = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if value < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    if not math.isfinite(value):
        raise ValueError(f"not a duration: {text!r} (it must be finite)")
    return value


class Overlap(StrEnum):
    """What a fire does while an earlier fire's sessions still run (Temporal's policies)."""

    SKIP = "skip"  # recorded skipped_overlap
    BUFFER_ONE = "buffer_one"  # waits for the running fire; a second waiting one is skipped
    ALLOW = "allow"  # runs alongside
    CANCEL_PREVIOUS = "cancel_previous"  # cancels the running fire's sessions, then runs


class FireOutcome(StrEnum):
    """The decision recorded for one fire time.

    ``dispatching`` is claimed but its batch not yet confirmed (a crash here
    is re-driven: the dispatch is idempotent); ``buffered`` waits for the
    running fire to finish.  The others are final.
    """

    DISPATCHING = "dispatching"
    DISPATCHED = "dispatched"
    BUFFERED = "buffered"
    SKIPPED_OVERLAP = "skipped_overlap"
    MISSED = "missed"
    FAILED = "failed"


class FireKind(StrEnum):
    """Why a fire exists: its schedule came due, or ``nahida schedule trigger``."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScheduleDef(_Value):
    """What a user declares; two equal definitions are the same schedule (``apply``).

    Attributes:
        name: unique among live schedules (:data:`NAME_PATTERN`).
        job: the job snapshot (a :class:`~nahida_workers.runtime.spec.JobSpec`
            dump), taken when the schedule is added, so editing the job file
            later changes nothing until the next ``add``/``apply``.
        job_path: where the job came from (display only), None for inline jobs.
        repos: absolute repository paths; one session per repository per fire.
        cron: a 5-field cron expression evaluated in ``timezone`` -- or
        every_s: an interval in seconds (fires at whole multiples of it since
            the Unix epoch, so every tick agrees on them).
        timezone: an IANA zone name (``Europe/Berlin``); cron only.
        overlap: see :class:`Overlap`.
        catchup_window_s: a fire later than this (beat was down) is recorded
            ``missed`` instead of run.  Must exceed the tick interval.
        jitter_s: each fire is delayed by a deterministic offset in
            ``[0, jitter_s)`` derived from the schedule id and fire time, so
            every beat computes the same one.
    """

    name: str = Field(pattern=NAME_PATTERN)
    job: dict[str, Any]
    job_path: str | None = None
    repos: tuple[str, ...] = Field(min_length=1)
    cron: str | None = None
    every_s: float | None = Field(None, ge=1.0, le=MAX_DURATION_S)
    timezone: str = "UTC"
    overlap: Overlap = Overlap.SKIP
    catchup_window_s: float = Field(300.0, ge=1.0, le=MAX_DURATION_S)
    jitter_s: float = Field(0.0, ge=0.0, le=MAX_DURATION_S)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (use an IANA name)") from None
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = " ".join(value.split())
        if len(value.split(" ")) != 5 or not croniter.is_valid(value):
            raise ValueError(f"invalid cron expression {value!r} (5 fields: m h dom mon dow)")
        try:  # a valid expression may still match no date at all (0 3 31 2 *)
            croniter(value, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
        except CroniterBadDateError:
            raise ValueError(f"cron expression {value!r} never fires (no such date)") from None
        return value

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleDef:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("give exactly one of cron and every")
        return self

    def same_trigger(self, other: ScheduleDef) -> bool:
        """Whether ``other`` fires at the same instants (cron, interval and time zone equal).

        An update that changes the trigger moves the schedule's cursor to the
        update time: the new trigger's fire times before the edit never
        existed, so they are neither caught up nor recorded missed.
        """
        return (self.cron, self.every_s, self.timezone) == (
            other.cron,
            other.every_s,
            other.timezone,
        )

    def trigger_text(self) -> str:
        """``cron 0 3 * * * Europe/Berlin`` or ``every 60s``."""
        if self.cron is not None:
            return f"cron {self.cron} {self.timezone}"
        return f"every {self.every_s:g}s"


class Schedule(_Value):
    """A ``schedules`` row: a definition and the state ticks move.

    Attributes:
        cursor: the newest scheduled fire time already decided (or the time
            the schedule was created or resumed): fires after it are pending.
        version: bumped by every decision and every change; a tick commits
            its plan only if the version is still the one it planned from.
    """

    schedule_id: str
    definition: ScheduleDef
    paused: bool = False
    cursor: datetime
    version: int = 0
    created_at: datetime
    updated_at: datetime
    paused_at: datetime | None = None
    removed_at: datetime | None = None

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.definition.name


class FireRecord(_Value):
    """A ``schedule_fires`` row: one decision about one fire time.

    ``(schedule_id, fire_time)`` is unique: the ledger refuses a second
    decision for a fire time, which is what makes two beats safe.

    Attributes:
        fire_time: the scheduled time (never the wall time of the tick).
        due_at: ``fire_time`` plus the jitter offset.
        batch_id: the fire's batch (deterministic from schedule id and fire time).
        decided_by: which ticker decided (host and process id).
        attempts: dispatch attempts so far (a failed one is retried later).
        updated_at: the last decision or dispatch attempt (a claim token for re-drives).
        detail: lateness (``late_s``), the fires a ``cancel_previous`` cancelled,
            the error of a ``failed`` dispatch ...
    """

    schedule_id: str
    fire_time: datetime
    due_at: datetime
    kind: FireKind = FireKind.SCHEDULED
    outcome: FireOutcome
    batch_id: str | None = None
    decided_at: datetime
    decided_by: str = ""
    dispatched_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    updated_at: datetime | None = None
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Claimed or dispatched and not yet finished: its sessions may still run."""
        if self.outcome is FireOutcome.DISPATCHING:
            return True
        return self.outcome is FireOutcome.DISPATCHED and self.finished_at is None
