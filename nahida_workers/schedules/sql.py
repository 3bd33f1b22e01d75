"""The SQL schedule store: PostgreSQL and SQLite, on the ledger's engine.

The two statements that make two beats safe (DESIGN.md section 8):

* ``UPDATE schedules SET version = v + 1 ... WHERE schedule_id = ? AND
  version = v`` -- the compare-and-set a tick's plan commits behind.  On
  PostgreSQL a concurrent tick's UPDATE waits for the row lock, then sees the
  new version and matches no row; on SQLite ``BEGIN IMMEDIATE`` serialises
  the writers.
* ``INSERT INTO schedule_fires ... ON CONFLICT DO NOTHING`` -- a fire time
  that already has a row is never decided again, whatever wrote it.

Every method is its own transaction; times are stored as UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError

from nahida_workers.errors import NotFoundError, UserError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import unavailable, utc
from nahida_workers.schedules.model import (
    FireKind,
    FireOutcome,
    FireRecord,
    Schedule,
    ScheduleDef,
)
from nahida_workers.schedules.policy import Plan
from nahida_workers.schedules.store import Change, apply_plan_rows, removed_fire_changes

__all__ = ["SqlScheduleStore"]

_OPEN = (FireOutcome.DISPATCHING.value, FireOutcome.BUFFERED.value)


def _u(value: datetime) -> datetime:
    """UTC, so SQLite's text timestamps compare and match exactly."""
    return value.astimezone(UTC)


def _schedule(row: Any) -> Schedule:
    return Schedule(
        schedule_id=row.schedule_id,
        definition=ScheduleDef.model_validate(row.definition_json),
        paused=row.paused,
        cursor=utc(row.cursor_at),
        version=row.version,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        paused_at=utc(row.paused_at),
        removed_at=utc(row.removed_at),
    )


def _fire(row: Any) -> FireRecord:
    return FireRecord(
        schedule_id=row.schedule_id,
        fire_time=utc(row.fire_time),
        due_at=utc(row.due_at),
        kind=FireKind(row.kind),
        outcome=FireOutcome(row.outcome),
        batch_id=row.batch_id,
        decided_at=utc(row.decided_at),
        decided_by=row.decided_by,
        dispatched_at=utc(row.dispatched_at),
        finished_at=utc(row.finished_at),
        attempts=row.attempts,
        updated_at=utc(row.updated_at),
        detail=row.detail_json or {},
    )


def _fire_values(fire: FireRecord) -> dict[str, Any]:
    return {
        "schedule_id": fire.schedule_id,
        "fire_time": _u(fire.fire_time),
        "due_at": _u(fire.due_at),
        "kind": fire.kind.value,
        "outcome": fire.outcome.value,
        "batch_id": fire.batch_id,
        "decided_at": _u(fire.decided_at),
        "decided_by": fire.decided_by[:200],
        "attempts": fire.attempts,
        "updated_at": _u(fire.updated_at or fire.decided_at),
        "detail_json": fire.detail,
    }


class SqlScheduleStore:
    """:class:`~nahida_workers.schedules.store.ScheduleStore` on a SQL engine.

    Args:
        engine: the ledger's engine (``SqlLedger.engine``), migrated to 0006 or later.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._dialect = postgresql if engine.dialect.name == "postgresql" else sqlite

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except IntegrityError:
            raise
        except DBAPIError as exc:
            raise unavailable(exc) from exc

    def _live_row(self, conn: Connection, name: str, *, lock: bool = False) -> Any:
        query = select(t.schedules).where(
            t.schedules.c.name == name, t.schedules.c.removed_at.is_(None)
        )
        if lock and self._dialect is postgresql:
            query = query.with_for_update()
        return conn.execute(query).first()

    def put(
        self, definition: ScheduleDef, *, schedule_id: str, at: datetime
    ) -> tuple[Schedule, Change]:
        """See :meth:`ScheduleStore.put`."""
        try:
            return self._put(definition, schedule_id=schedule_id, at=at)
        except IntegrityError:  # a concurrent put created the name first
            return self._put(definition, schedule_id=schedule_id, at=at)

    def _put(
        self, definition: ScheduleDef, *, schedule_id: str, at: datetime
    ) -> tuple[Schedule, Change]:
        data = definition.model_dump(mode="json")
        with self._tx() as conn:
            row = self._live_row(conn, definition.name, lock=True)
            if row is None:
                if conn.execute(
                    select(t.schedules.c.schedule_id).where(
                        t.schedules.c.schedule_id == schedule_id
                    )
                ).first():
                    raise UserError(f"schedule id {schedule_id} is taken")
                conn.execute(
                    insert(t.schedules).values(
                        schedule_id=schedule_id,
                        name=definition.name,
                        definition_json=data,
                        paused=False,
                        cursor_at=_u(at),
                        version=0,
                        created_at=_u(at),
                        updated_at=_u(at),
                    )
                )
                return self._by_id(conn, schedule_id), Change.CREATED
            current = _schedule(row)
            if current.definition == definition:
                return current, Change.UNCHANGED
            cursor = current.cursor
            if not current.definition.same_trigger(definition):
                cursor = max(cursor, at)  # the new trigger's past fire times never existed
            conn.execute(
                update(t.schedules)
                .where(t.schedules.c.schedule_id == current.schedule_id)
                .values(
                    definition_json=data,
                    cursor_at=_u(cursor),
                    version=t.schedules.c.version + 1,
                    updated_at=_u(at),
                )
            )
            return self._by_id(conn, current.schedule_id), Change.UPDATED

    def _by_id(self, conn: Connection, schedule_id: str) -> Schedule:
        row = conn.execute(
            select(t.schedules).where(t.schedules.c.schedule_id == schedule_id)
        ).one()
        return _schedule(row)

    def get(self, name: str) -> Schedule | None:
        """See :meth:`ScheduleStore.get`."""
        with self._tx() as conn:
            row = self._live_row(conn, name)
        return None if row is None else _schedule(row)

    def get_by_id(self, schedule_id: str) -> Schedule | None:
        """See :meth:`ScheduleStore.get_by_id`."""
        with self._tx() as conn:
            row = conn.execute(
                select(t.schedules).where(t.schedules.c.schedule_id == schedule_id)
            ).first()
        return None if row is None else _schedule(row)

    def live(self) -> list[Schedule]:
        """See :meth:`ScheduleStore.live`."""
        with self._tx() as conn:
            rows = conn.execute(
                select(t.schedules)
                .where(t.schedules.c.removed_at.is_(None))
                .order_by(t.schedules.c.name)
            ).all()
        return [_schedule(r) for r in rows]

    def removed(self) -> list[Schedule]:
        """See :meth:`ScheduleStore.removed`."""
        with self._tx() as conn:
            rows = conn.execute(
                select(t.schedules)
                .where(t.schedules.c.removed_at.is_not(None))
                .order_by(t.schedules.c.removed_at.desc(), t.schedules.c.schedule_id.desc())
            ).all()
        return [_schedule(r) for r in rows]

    def set_paused(self, name: str, paused: bool, *, at: datetime) -> Schedule:
        """See :meth:`ScheduleStore.set_paused`."""
        with self._tx() as conn:
            row = self._live_row(conn, name, lock=True)
            if row is None:
                raise NotFoundError(f"no schedule {name}")
            current = _schedule(row)
            if current.paused == paused:
                return current
            values: dict[str, Any] = {
                "paused": paused,
                "version": t.schedules.c.version + 1,
                "updated_at": _u(at),
            }
            if paused:
                values["paused_at"] = _u(at)
            else:
                values["cursor_at"] = _u(max(current.cursor, at))
            conn.execute(
                update(t.schedules)
                .where(t.schedules.c.schedule_id == current.schedule_id)
                .values(**values)
            )
            return self._by_id(conn, current.schedule_id)

    def remove(self, name: str, *, at: datetime) -> Schedule:
        """See :meth:`ScheduleStore.remove`."""
        with self._tx() as conn:
            row = self._live_row(conn, name, lock=True)
            if row is None:
                raise NotFoundError(f"no schedule {name}")
            conn.execute(
                update(t.schedules)
                .where(t.schedules.c.schedule_id == row.schedule_id)
                .values(removed_at=_u(at), version=t.schedules.c.version + 1, updated_at=_u(at))
            )
            self._fail_buffered(conn, row.schedule_id, at)
            return self._by_id(conn, row.schedule_id)

    def _fail_buffered(self, conn: Connection, schedule_id: str, at: datetime) -> None:
        """A removed schedule's buffered fires become failed (see :meth:`remove`)."""
        fires = t.schedule_fires
        buffered = conn.execute(
            select(fires).where(
                fires.c.schedule_id == schedule_id,
                fires.c.outcome == FireOutcome.BUFFERED.value,
            )
        ).all()
        for fire in map(_fire, buffered):
            changes = removed_fire_changes(fire, at)
            conn.execute(
                update(fires)
                .where(
                    fires.c.schedule_id == schedule_id,
                    fires.c.fire_time == _u(fire.fire_time),
                    fires.c.outcome == FireOutcome.BUFFERED.value,
                )
                .values(
                    outcome=changes["outcome"].value,
                    detail_json=changes["detail"],
                    updated_at=_u(at),
                )
            )

    def commit_plan(
        self, schedule_id: str, *, version: int, plan: Plan, at: datetime, by: str
    ) -> list[FireRecord] | None:
        """See :meth:`ScheduleStore.commit_plan`."""
        values: dict[str, Any] = {"version": version + 1, "updated_at": _u(at)}
        if plan.cursor is not None:
            values["cursor_at"] = _u(plan.cursor)
        fires = t.schedule_fires
        with self._tx() as conn:
            won = conn.execute(
                update(t.schedules)
                .where(
                    t.schedules.c.schedule_id == schedule_id,
                    t.schedules.c.version == version,
                    t.schedules.c.removed_at.is_(None),
                )
                .values(**values)
            )
            if won.rowcount != 1:
                return None  # nothing written: another tick decided from this version
            written = []
            for row in apply_plan_rows(plan, schedule_id, at=at, by=by):
                statement = (
                    self._dialect.insert(fires)
                    .values(**_fire_values(row))
                    .on_conflict_do_nothing(index_elements=["schedule_id", "fire_time"])
                    .returning(fires.c.fire_time)  # psycopg reports no rowcount for it
                )
                if conn.execute(statement).first() is not None:
                    written.append(row)
            if plan.release is not None:
                key = and_(
                    fires.c.schedule_id == schedule_id, fires.c.fire_time == _u(plan.release)
                )
                released = conn.execute(
                    update(fires)
                    .where(key, fires.c.outcome == FireOutcome.BUFFERED.value)
                    .values(
                        outcome=FireOutcome.DISPATCHING.value,
                        attempts=fires.c.attempts + 1,
                        updated_at=_u(at),
                    )
                )
                if released.rowcount == 1:
                    written.append(_fire(conn.execute(select(fires).where(key)).one()))
            return written

    def fires(self, schedule_id: str, *, limit: int = 50) -> list[FireRecord]:
        """See :meth:`ScheduleStore.fires`."""
        fires = t.schedule_fires
        with self._tx() as conn:
            rows = conn.execute(
                select(fires)
                .where(fires.c.schedule_id == schedule_id)
                .order_by(fires.c.fire_time.desc())
                .limit(limit)
            ).all()
        return [_fire(r) for r in rows]

    def open_fires(self, schedule_id: str) -> list[FireRecord]:
        """See :meth:`ScheduleStore.open_fires`."""
        fires = t.schedule_fires
        with self._tx() as conn:
            rows = conn.execute(
                select(fires)
                .where(
                    fires.c.schedule_id == schedule_id,
                    or_(
                        fires.c.outcome.in_(_OPEN),
                        and_(
                            fires.c.outcome == FireOutcome.DISPATCHED.value,
                            fires.c.finished_at.is_(None),
                        ),
                    ),
                )
                .order_by(fires.c.fire_time)
            ).all()
        return [_fire(r) for r in rows]

    def get_fire(self, schedule_id: str, fire_time: datetime) -> FireRecord | None:
        """See :meth:`ScheduleStore.get_fire`."""
        fires = t.schedule_fires
        with self._tx() as conn:
            row = conn.execute(
                select(fires).where(
                    fires.c.schedule_id == schedule_id, fires.c.fire_time == _u(fire_time)
                )
            ).first()
        return None if row is None else _fire(row)

    def _update_fire(
        self,
        schedule_id: str,
        fire_time: datetime,
        expect: FireOutcome,
        *conditions: Any,
        **values: Any,
    ) -> bool:
        fires = t.schedule_fires
        with self._tx() as conn:
            done = conn.execute(
                update(fires)
                .where(
                    fires.c.schedule_id == schedule_id,
                    fires.c.fire_time == _u(fire_time),
                    fires.c.outcome == expect.value,
                    *conditions,
                )
                .values(**values)
            )
        return bool(done.rowcount == 1)

    def mark_dispatched(
        self, schedule_id: str, fire_time: datetime, *, at: datetime, undelivered: int = 0
    ) -> bool:
        """See :meth:`ScheduleStore.mark_dispatched`."""
        detail: dict[str, Any] = {}
        if undelivered:
            current = self.get_fire(schedule_id, fire_time)
            if current is None:
                return False
            detail = {"detail_json": {**current.detail, "undelivered": undelivered}}
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHING,
            outcome=FireOutcome.DISPATCHED.value,
            dispatched_at=_u(at),
            updated_at=_u(at),
            **detail,
        )

    def mark_finished(self, schedule_id: str, fire_time: datetime, *, at: datetime) -> bool:
        """See :meth:`ScheduleStore.mark_finished`."""
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHED,
            t.schedule_fires.c.finished_at.is_(None),
            finished_at=_u(at),
        )

    def claim_redrive(
        self, schedule_id: str, fire_time: datetime, *, seen: datetime | None, at: datetime
    ) -> bool:
        """See :meth:`ScheduleStore.claim_redrive`."""
        fires = t.schedule_fires
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHING,
            fires.c.updated_at == _u(seen) if seen is not None else fires.c.updated_at.is_(None),
            attempts=fires.c.attempts + 1,
            updated_at=_u(at),
        )

    def fail(self, schedule_id: str, fire_time: datetime, *, error: str, at: datetime) -> bool:
        """See :meth:`ScheduleStore.fail`."""
        current = self.get_fire(schedule_id, fire_time)
        if current is None:
            return False
        return self._update_fire(
            schedule_id,
            fire_time,
            FireOutcome.DISPATCHING,
            outcome=FireOutcome.FAILED.value,
            detail_json={**current.detail, "error": error},
            updated_at=_u(at),
        )

    def stale_dispatching(self, *, older_than: datetime) -> list[FireRecord]:
        """See :meth:`ScheduleStore.stale_dispatching`."""
        fires = t.schedule_fires
        with self._tx() as conn:
            rows = conn.execute(
                select(fires)
                .where(
                    fires.c.outcome == FireOutcome.DISPATCHING.value,
                    fires.c.updated_at < _u(older_than),
                )
                .order_by(fires.c.fire_time)
            ).all()
        return [_fire(r) for r in rows]
