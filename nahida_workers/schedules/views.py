"""Schedules as documents: what ``nahida schedule list/show`` and ``/v1/schedules`` print.

One shape for the command line (``--json``) and the API, so the two cannot
drift: a schedule's state (``active``, ``paused``, ``removed``), its trigger,
next and last fire, and its fires, each with its decision, its batch and who
decided it.  A removed schedule keeps its fires in the ledger; it is reached
by name or id with ``removed=True`` (``schedule show NAME --removed``,
``GET /v1/removed-schedules/{name}``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nahida_workers.errors import NotFoundError, UserError
from nahida_workers.schedules.model import FireRecord, Schedule
from nahida_workers.schedules.store import ScheduleStore
from nahida_workers.schedules.timing import iso, jitter_offset, next_fire

__all__ = [
    "find_schedule",
    "fire_json",
    "fires_with_usage",
    "next_fire_of",
    "schedule_json",
    "state_of",
]


def next_fire_of(schedule: Schedule, now: datetime) -> datetime | None:
    """When the schedule fires next (its jitter included); None while paused or removed."""
    if schedule.paused or schedule.removed_at is not None:
        return None
    fire = next_fire(schedule.definition, max(schedule.cursor, now))
    return fire + jitter_offset(schedule.schedule_id, fire, schedule.definition.jitter_s)


def state_of(schedule: Schedule) -> str:
    """``removed``, ``paused`` or ``active``."""
    if schedule.removed_at is not None:
        return "removed"
    return "paused" if schedule.paused else "active"


def fire_json(fire: FireRecord) -> dict[str, Any]:
    """One fire as JSON (times ISO 8601 UTC)."""
    data = fire.model_dump(mode="json")
    data["fire_time"] = iso(fire.fire_time)
    return data


def fires_with_usage(ledger: Any, fires: list[FireRecord], prices: Any) -> list[dict[str, Any]]:
    """Each fire as JSON with ``usage``: what its batch's sessions spent (None: no batch).

    Args:
        ledger: the ledger the fires' batches are in.
        prices: a :class:`~nahida_workers.core.usage.PriceTable` or None.
    """
    from nahida_workers.spend import batch_usage

    out = []
    for fire in fires:
        data = fire_json(fire)
        data["usage"] = batch_usage(ledger, fire.batch_id, prices) if fire.batch_id else None
        out.append(data)
    return out


def schedule_json(schedule: Schedule, fires: list[FireRecord], now: datetime) -> dict[str, Any]:
    """A schedule as JSON; ``fires`` newest first (the first is its last fire)."""
    upcoming = next_fire_of(schedule, now)
    last = fires[0] if fires else None
    return {
        "name": schedule.name,
        "schedule_id": schedule.schedule_id,
        "state": state_of(schedule),
        "trigger": schedule.definition.trigger_text(),
        "next_fire": iso(upcoming) if upcoming else None,
        "last_fire": fire_json(last) if last else None,
        "definition": schedule.definition.model_dump(mode="json", exclude={"job"}),
        "job": schedule.definition.job.get("name"),
        "cursor": iso(schedule.cursor),
        "version": schedule.version,
        "created_at": schedule.created_at.isoformat(),
        "updated_at": schedule.updated_at.isoformat(),
        "removed_at": schedule.removed_at.isoformat() if schedule.removed_at else None,
    }


def find_schedule(store: ScheduleStore, ref: str, *, removed: bool = False) -> Schedule:
    """The schedule ``ref`` names: a name, an id, or a unique prefix of an id.

    Live schedules only, unless ``removed``: then removed ones only, and of
    several removed under one name the latest removal.

    Raises:
        NotFoundError: nothing matches (exit 2, 404).
        UserError: ``ref`` is the prefix of several ids (exit 2, 400).
    """
    if not removed:
        found = store.get(ref)
        if found is not None:
            return found
        pool = store.live()
    else:
        pool = store.removed()
        named = [s for s in pool if s.name == ref or s.schedule_id == ref]
        if named:
            return named[0]
    matches = [s for s in pool if s.schedule_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise UserError(f"{ref!r} is the prefix of {len(matches)} schedule ids; give more")
    if removed:
        raise NotFoundError(f"no removed schedule {ref}")
    raise NotFoundError(
        f"no schedule {ref} (a removed one: `schedule show --removed`, /v1/removed-schedules)"
    )
