"""The ScheduleStore port and its in-memory twin (DESIGN.md sections 8 and 9).

The store is where "the ledger decides" (DESIGN.md section 8): a tick commits a
plan only through :meth:`ScheduleStore.commit_plan`, a compare-and-set on the
schedule's ``version`` in the same transaction that inserts the fire rows
(``(schedule_id, fire_time)`` unique, insert-if-absent).  Two beats that
plan the same fire race on that commit; exactly one wins and dispatches.

Real adapter: :class:`~nahida_workers.schedules.sql.SqlScheduleStore`
(PostgreSQL, SQLite; same engine as the ledger).  Twin: :class:`MemoryScheduleStore`.
One contract suite runs against all of them (``tests/contract/test_schedule_store_contract.py``).
"""

from __future__ import annotations

import threading
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from nahida_workers.errors import NotFoundError, UserError
from nahida_workers.schedules.model import FireOutcome, FireRecord, Schedule, ScheduleDef
from nahida_workers.schedules.policy import Plan

__all__ = [
    "REMOVED_ERROR",
    "Change",
    "MemoryScheduleStore",
    "ScheduleStore",
    "apply_plan_rows",
    "removed_fire_changes",
]


class Change(StrEnum):
    """What :meth:`ScheduleStore.put` did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


class ScheduleStore(Protocol):
    """Schedules and their fire decisions.  Every method is its own transaction.

    Errors: :class:`~nahida_workers.errors.NotFoundError` for an unknown
    name; :class:`~nahida_workers.errors.LedgerUnavailableError` when the
    database cannot be reached.
    """

    def put(
        self, definition: ScheduleDef, *, schedule_id: str, at: datetime
    ) -> tuple[Schedule, Change]:
        """Create the schedule, or update the live one of that name.

        An update keeps the id, cursor and pause state and bumps the version
        -- except that a changed trigger (cron, interval or time zone) moves
        the cursor to ``at`` (never back): fire times of the new trigger
        before the edit are neither run nor recorded missed.  An equal
        definition writes nothing (``apply`` is idempotent).
        ``schedule_id`` is used only when a schedule is created.
        """
        ...

    def get(self, name: str) -> Schedule | None:
        """The live schedule named ``name``."""
        ...

    def get_by_id(self, schedule_id: str) -> Schedule | None:
        """A schedule by id, removed ones included."""
        ...

    def live(self) -> list[Schedule]:
        """Schedules not removed, by name."""
        ...

    def removed(self) -> list[Schedule]:
        """Removed schedules (their fires stay in the ledger), the latest removal first."""
        ...

    def set_paused(self, name: str, paused: bool, *, at: datetime) -> Schedule:
        """Pause or resume.

        Resuming moves the cursor to ``at``: fire times that passed while
        paused are not run.  Already in that state: no write.
        """
        ...

    def remove(self, name: str, *, at: datetime) -> Schedule:
        """Mark the schedule removed (its fires stay in the ledger; the name is free again).

        Its ``buffered`` fires, which no tick will release any more, become
        ``failed`` with ``detail.error`` :data:`REMOVED_ERROR`, in the same
        transaction.  ``dispatching`` ones may be mid-dispatch: a stale one is
        failed the same way by the next re-drive instead of dispatched.
        """
        ...

    def commit_plan(
        self, schedule_id: str, *, version: int, plan: Plan, at: datetime, by: str
    ) -> list[FireRecord] | None:
        """Commit ``plan`` iff the schedule's version is still ``version``.

        In one transaction: bump the version, move the cursor, insert each
        decision unless its fire time already has a row, and move a released
        buffered fire to ``dispatching``.

        Returns:
            The rows this commit wrote (the released fire last), or None when
            the version moved: another tick decided first and nothing was written.
        """
        ...

    def fires(self, schedule_id: str, *, limit: int = 50) -> list[FireRecord]:
        """The schedule's newest ``limit`` fires, newest first."""
        ...

    def open_fires(self, schedule_id: str) -> list[FireRecord]:
        """Fires that are dispatching, buffered, or dispatched and not finished; oldest first."""
        ...

    def get_fire(self, schedule_id: str, fire_time: datetime) -> FireRecord | None:
        """One fire row."""
        ...

    def mark_dispatched(
        self, schedule_id: str, fire_time: datetime, *, at: datetime, undelivered: int = 0
    ) -> bool:
        """``dispatching`` -> ``dispatched``; False if it was not dispatching.

        ``undelivered`` > 0 (sessions recorded while the broker was down, which
        the sweeper publishes) is kept as ``detail.undelivered``.
        """
        ...

    def mark_finished(self, schedule_id: str, fire_time: datetime, *, at: datetime) -> bool:
        """Set ``finished_at`` on a dispatched fire (its sessions are done), once."""
        ...

    def claim_redrive(
        self, schedule_id: str, fire_time: datetime, *, seen: datetime | None, at: datetime
    ) -> bool:
        """Take a stale ``dispatching`` fire for one more attempt.

        Conditional on ``updated_at`` still being ``seen`` (what the caller
        read), so of two tickers only one re-drives it; counts the attempt.
        """
        ...

    def fail(self, schedule_id: str, fire_time: datetime, *, error: str, at: datetime) -> bool:
        """``dispatching`` -> ``failed`` with ``error`` in the detail; False if not dispatching."""
        ...

    def stale_dispatching(self, *, older_than: datetime) -> list[FireRecord]:
        """``dispatching`` fires last touched before ``older_than`` (a crashed dispatch)."""
        ...


#: ``detail.error`` of a fire failed because its schedule was removed before it ran.
REMOVED_ERROR = "schedule removed before this fire was dispatched"


def removed_fire_changes(fire: FireRecord, at: datetime) -> dict[str, Any]:
    """The fields a pending fire of a removed schedule gets: ``failed``, and why."""
    return {
        "outcome": FireOutcome.FAILED,
        "detail": {**fire.detail, "error": REMOVED_ERROR},
        "updated_at": at,
    }


def apply_plan_rows(plan: Plan, schedule_id: str, *, at: datetime, by: str) -> list[FireRecord]:
    """The fire rows a plan's decisions become (adapters insert them)."""
    rows = []
    for d in plan.decisions:
        dispatching = d.outcome is FireOutcome.DISPATCHING
        rows.append(
            FireRecord(
                schedule_id=schedule_id,
                fire_time=d.fire_time,
                due_at=d.due_at,
                kind=d.kind,
                outcome=d.outcome,
                batch_id=d.batch_id,
                decided_at=at,
                decided_by=by,
                attempts=1 if dispatching else 0,
                updated_at=at,
                detail=dict(d.detail),
            )
        )
    return rows


class MemoryScheduleStore:
    """The in-memory twin: dicts under one lock (each method is one atomic step)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schedules: dict[str, Schedule] = {}
        self._fires: dict[tuple[str, datetime], FireRecord] = {}

    def _live(self, name: str) -> Schedule | None:
        return next(
            (s for s in self._schedules.values() if s.name == name and s.removed_at is None), None
        )

    def _need(self, name: str) -> Schedule:
        found = self._live(name)
        if found is None:
            raise NotFoundError(f"no schedule {name}")
        return found

    def _save(self, schedule: Schedule, **changes: Any) -> Schedule:
        updated = schedule.model_copy(update=changes)
        self._schedules[schedule.schedule_id] = updated
        return updated

    def put(
        self, definition: ScheduleDef, *, schedule_id: str, at: datetime
    ) -> tuple[Schedule, Change]:
        """See :meth:`ScheduleStore.put`."""
        with self._lock:
            current = self._live(definition.name)
            if current is None:
                if schedule_id in self._schedules:
                    raise UserError(f"schedule id {schedule_id} is taken")
                created = Schedule(
                    schedule_id=schedule_id,
                    definition=definition,
                    cursor=at,
                    created_at=at,
                    updated_at=at,
                )
                self._schedules[schedule_id] = created
                return created, Change.CREATED
            if current.definition == definition:
                return current, Change.UNCHANGED
            cursor = current.cursor
            if not current.definition.same_trigger(definition):
                cursor = max(cursor, at)
            return self._save(
                current,
                definition=definition,
                cursor=cursor,
                version=current.version + 1,
                updated_at=at,
            ), Change.UPDATED

    def get(self, name: str) -> Schedule | None:
        """See :meth:`ScheduleStore.get`."""
        with self._lock:
            return self._live(name)

    def get_by_id(self, schedule_id: str) -> Schedule | None:
        """See :meth:`ScheduleStore.get_by_id`."""
        with self._lock:
            return self._schedules.get(schedule_id)

    def live(self) -> list[Schedule]:
        """See :meth:`ScheduleStore.live`."""
        with self._lock:
            found = [s for s in self._schedules.values() if s.removed_at is None]
        return sorted(found, key=lambda s: s.name)

    def removed(self) -> list[Schedule]:
        """See :meth:`ScheduleStore.removed`."""
        with self._lock:
            found = [s for s in self._schedules.values() if s.removed_at is not None]
        return sorted(found, key=lambda s: (s.removed_at, s.schedule_id), reverse=True)

    def set_paused(self, name: str, paused: bool, *, at: datetime) -> Schedule:
        """See :meth:`ScheduleStore.set_paused`."""
        with self._lock:
            current = self._need(name)
            if current.paused == paused:
                return current
            if paused:
                return self._save(
                    current, paused=True, paused_at=at, version=current.version + 1, updated_at=at
                )
            return self._save(
                current,
                paused=False,
                cursor=max(current.cursor, at),
                version=current.version + 1,
                updated_at=at,
            )

    def remove(self, name: str, *, at: datetime) -> Schedule:
        """See :meth:`ScheduleStore.remove`."""
        with self._lock:
            current = self._need(name)
            for key, fire in list(self._fires.items()):
                if fire.schedule_id == current.schedule_id and fire.outcome is FireOutcome.BUFFERED:
                    self._fires[key] = fire.model_copy(update=removed_fire_changes(fire, at))
            return self._save(current, removed_at=at, version=current.version + 1, updated_at=at)

    def commit_plan(
        self, schedule_id: str, *, version: int, plan: Plan, at: datetime, by: str
    ) -> list[FireRecord] | None:
        """See :meth:`ScheduleStore.commit_plan`."""
        with self._lock:
            current = self._schedules.get(schedule_id)
            if current is None or current.version != version or current.removed_at is not None:
                return None
            written = []
            for row in apply_plan_rows(plan, schedule_id, at=at, by=by):
                key = (schedule_id, row.fire_time)
                if key not in self._fires:
                    self._fires[key] = row
                    written.append(row)
            if plan.release is not None:
                key = (schedule_id, plan.release)
                buffered = self._fires.get(key)
                if buffered is not None and buffered.outcome is FireOutcome.BUFFERED:
                    released = buffered.model_copy(
                        update={
                            "outcome": FireOutcome.DISPATCHING,
                            "attempts": buffered.attempts + 1,
                            "updated_at": at,
                        }
                    )
                    self._fires[key] = released
                    written.append(released)
            cursor = current.cursor if plan.cursor is None else max(current.cursor, plan.cursor)
            self._save(current, version=version + 1, cursor=cursor, updated_at=at)
            return written

    def fires(self, schedule_id: str, *, limit: int = 50) -> list[FireRecord]:
        """See :meth:`ScheduleStore.fires`."""
        with self._lock:
            found = [f for (sid, _), f in self._fires.items() if sid == schedule_id]
        return sorted(found, key=lambda f: f.fire_time, reverse=True)[:limit]

    def open_fires(self, schedule_id: str) -> list[FireRecord]:
        """See :meth:`ScheduleStore.open_fires`."""
        with self._lock:
            found = [
                f
                for (sid, _), f in self._fires.items()
                if sid == schedule_id and (f.active or f.outcome is FireOutcome.BUFFERED)
            ]
        return sorted(found, key=lambda f: f.fire_time)

    def get_fire(self, schedule_id: str, fire_time: datetime) -> FireRecord | None:
        """See :meth:`ScheduleStore.get_fire`."""
        with self._lock:
            return self._fires.get((schedule_id, fire_time))

    def _update_fire(
        self, schedule_id: str, fire_time: datetime, expect: FireOutcome, **changes: Any
    ) -> bool:
        with self._lock:
            key = (schedule_id, fire_time)
            row = self._fires.get(key)
            if row is None or row.outcome is not expect:
                return False
            seen = changes.pop("_seen", row.updated_at)
            if row.updated_at != seen:
                return False
            if changes.pop("_unfinished", False) and row.finished_at is not None:
                return False
            if "attempts" in changes:
                changes["attempts"] = row.attempts + 1
            if "detail" in changes:
                changes["detail"] = {**row.detail, **changes["detail"]}
            self._fires[key] = row.model_copy(update=changes)
            return True

    def mark_dispatched(
        self, schedule_id: str, fire_time: datetime, *, at: datetime, undelivered: int = 0
    ) -> bool:
        """See :meth:`ScheduleStore.mark_dispatched`."""
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHING,
            outcome=FireOutcome.DISPATCHED,
            dispatched_at=at,
            updated_at=at,
            detail={"undelivered": undelivered} if undelivered else {},
        )

    def mark_finished(self, schedule_id: str, fire_time: datetime, *, at: datetime) -> bool:
        """See :meth:`ScheduleStore.mark_finished`."""
        return self._update_fire(
            schedule_id, fire_time, FireOutcome.DISPATCHED, _unfinished=True, finished_at=at
        )

    def claim_redrive(
        self, schedule_id: str, fire_time: datetime, *, seen: datetime | None, at: datetime
    ) -> bool:
        """See :meth:`ScheduleStore.claim_redrive`."""
        return self._update_fire(
            schedule_id, fire_time, FireOutcome.DISPATCHING, _seen=seen, attempts=1, updated_at=at
        )

    def fail(self, schedule_id: str, fire_time: datetime, *, error: str, at: datetime) -> bool:
        """See :meth:`ScheduleStore.fail`."""
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHING,
            outcome=FireOutcome.FAILED,
            detail={"error": error},
            updated_at=at,
        )

    def stale_dispatching(self, *, older_than: datetime) -> list[FireRecord]:
        """See :meth:`ScheduleStore.stale_dispatching`."""
        with self._lock:
            found = [
                f
                for f in self._fires.values()
                if f.outcome is FireOutcome.DISPATCHING
                and (f.updated_at or f.decided_at) < older_than
            ]
        return sorted(found, key=lambda f: f.fire_time)
