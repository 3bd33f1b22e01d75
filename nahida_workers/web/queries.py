"""The console's paged, filtered reads of the SQL ledger (read-only; each its own snapshot).

The ledger port reads whole lists (``sessions()``, ``batches()``): fine for a
CLI report, not for an index a schedule fills with a batch every minute.
These queries page in SQL (``LIMIT``/``OFFSET``, newest first) and filter in
SQL: a session by its state (``queued``/``running``/``waiting`` from
``sessions.status``, ``completed``/``failed``/... from its latest run), its
batch's job, its batch, the schedule whose fire made its batch, its parent.
They run on the ledger's read engine (``SqlLedger.reader``), which is what
``nahida serve`` always has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.engine import Engine

from nahida_workers.core.events import SessionStatus, TerminalState
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import ReadScope, utc

__all__ = [
    "PAGE_SIZE",
    "STATES",
    "BatchFilter",
    "Page",
    "SessionFilter",
    "batch_page",
    "count_rows",
    "distinct_jobs",
    "latest_state",
    "page_number",
    "session_page",
    "session_state",
    "state_counts",
]

#: Rows per page of every console list.
PAGE_SIZE = 25
#: Every state a session list filters by: the statuses, then the terminal states.
STATES = (
    *(s.value for s in SessionStatus if s is not SessionStatus.DONE),
    *(s.value for s in TerminalState),
)


@dataclass(frozen=True)
class Page:
    """One page of a list: its rows, where it is and how many rows match in all."""

    rows: list[dict[str, Any]]
    number: int
    total: int
    size: int = PAGE_SIZE

    @property
    def pages(self) -> int:
        """How many pages the matching rows fill (at least one)."""
        return max(1, -(-self.total // self.size))


@dataclass(frozen=True)
class SessionFilter:
    """What a session list keeps ('' = any); values are matched exactly."""

    state: str = ""
    job: str = ""
    batch: str = ""
    schedule: str = ""
    parent: str = ""

    def as_query(self) -> dict[str, str]:
        """The non-empty filters, as URL query parameters."""
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass(frozen=True)
class BatchFilter:
    """What a batch list keeps ('' = any)."""

    job: str = ""
    schedule: str = ""

    def as_query(self) -> dict[str, str]:
        """The non-empty filters, as URL query parameters."""
        return {k: v for k, v in self.__dict__.items() if v}


def latest_state() -> Any:
    """The terminal state of a session's latest run (a correlated scalar subquery)."""
    r = t.agent_runs.c
    return (
        select(r.terminal_state)
        .where(r.session_id == t.sessions.c.session_id)
        .order_by(r.started_at.desc(), r.run_id.desc())
        .limit(1)
        .scalar_subquery()
    )


def _fired_batches(schedule_id: str) -> Any:
    f = t.schedule_fires.c
    return select(f.batch_id).where(f.schedule_id == schedule_id, f.batch_id.is_not(None))


def _session_conditions(flt: SessionFilter, latest: Any) -> list[ColumnElement[bool]]:
    s = t.sessions.c
    where: list[ColumnElement[bool]] = []
    if flt.state in {st.value for st in SessionStatus}:
        where.append(s.status == flt.state)
    elif flt.state:
        where.append(s.status == SessionStatus.DONE.value)
        where.append(latest == flt.state)
    if flt.batch:
        where.append(s.batch_id == flt.batch)
    if flt.parent:
        where.append(s.parent_id == flt.parent)
    if flt.job:
        b = t.batches.c
        where.append(s.batch_id.in_(select(b.batch_id).where(b.job_name == flt.job)))
    if flt.schedule:
        where.append(s.batch_id.in_(_fired_batches(flt.schedule)))
    return where


def count_rows(engine: Engine, query: Select[Any]) -> int:
    """How many rows ``query`` matches (one ``COUNT(*)`` over it)."""
    with ReadScope(engine) as conn:
        return int(conn.execute(select(func.count()).select_from(query.subquery())).scalar_one())


def page_number(page: int, total: int) -> int:
    """``page`` clamped to 1 .. the last page of ``total`` rows."""
    return min(max(1, page), max(1, -(-total // PAGE_SIZE)))


def session_state(status: str, latest: str | None) -> str:
    """What a session shows: its status until done, then its latest run's terminal state."""
    if status != SessionStatus.DONE.value:
        return status
    return latest or status


def session_page(engine: Engine, flt: SessionFilter, *, page: int = 1) -> Page:
    """Sessions matching ``flt``, newest first, page ``page`` (1-based, clamped)."""
    s, b = t.sessions.c, t.batches.c
    latest = latest_state().label("latest")
    query = (
        select(
            s.session_id,
            s.parent_id,
            s.batch_id,
            s.workspace,
            s.status,
            s.created_at,
            s.updated_at,
            b.job_name,
            latest,
        )
        .select_from(t.sessions.outerjoin(t.batches, b.batch_id == s.batch_id))
        .where(*_session_conditions(flt, latest_state()))
    )
    total = count_rows(engine, query)
    number = page_number(page, total)
    ordered = query.order_by(s.created_at.desc(), s.session_id.desc())
    with ReadScope(engine) as conn:
        rows = conn.execute(ordered.limit(PAGE_SIZE).offset((number - 1) * PAGE_SIZE)).all()
    return Page(
        [
            {
                "session_id": r.session_id,
                "parent_id": r.parent_id,
                "batch_id": r.batch_id,
                "workspace": r.workspace,
                "state": session_state(r.status, r.latest),
                "job": r.job_name,
                "created_at": utc(r.created_at),
                "updated_at": utc(r.updated_at),
            }
            for r in rows
        ],
        number,
        total,
    )


def batch_page(engine: Engine, flt: BatchFilter, *, page: int = 1) -> Page:
    """Batches matching ``flt`` with their session counts and schedule, newest first."""
    b, s, f, sc = t.batches.c, t.sessions.c, t.schedule_fires.c, t.schedules.c
    top = (s.batch_id == b.batch_id) & s.parent_id.is_(None)
    sessions = select(func.count()).where(top).scalar_subquery()
    done = select(func.count()).where(top, s.status == SessionStatus.DONE.value).scalar_subquery()
    fired_by = (
        select(sc.name)
        .select_from(t.schedule_fires.join(t.schedules, sc.schedule_id == f.schedule_id))
        .where(f.batch_id == b.batch_id)
        .limit(1)
        .scalar_subquery()
    )
    query = select(
        b.batch_id,
        b.job_name,
        b.created_at,
        sessions.label("sessions"),
        done.label("done"),
        fired_by.label("schedule"),
    )
    if flt.job:
        query = query.where(b.job_name == flt.job)
    if flt.schedule:
        query = query.where(b.batch_id.in_(_fired_batches(flt.schedule)))
    total = count_rows(engine, query)
    number = page_number(page, total)
    ordered = query.order_by(b.created_at.desc(), b.batch_id.desc())
    with ReadScope(engine) as conn:
        rows = conn.execute(ordered.limit(PAGE_SIZE).offset((number - 1) * PAGE_SIZE)).all()
    return Page(
        [
            {
                "batch_id": r.batch_id,
                "job": r.job_name,
                "created_at": utc(r.created_at),
                "sessions": int(r.sessions),
                "done": int(r.done),
                "schedule": r.schedule,
            }
            for r in rows
        ],
        number,
        total,
    )


def distinct_jobs(engine: Engine) -> Sequence[str]:
    """Every job name a batch was run with (the job filter's choices), sorted."""
    b = t.batches.c
    with ReadScope(engine) as conn:
        return [str(v) for v in conn.execute(select(b.job_name).distinct().order_by(b.job_name))]


def state_counts(engine: Engine, flt: SessionFilter) -> dict[str, int]:
    """How many sessions matching ``flt`` are in each shown state (a batch's summary)."""
    s = t.sessions.c
    latest = latest_state()
    query = (
        select(s.status, latest.label("latest"), func.count())
        .where(*_session_conditions(flt, latest_state()))
        .group_by(s.status, latest)
    )
    counts: dict[str, int] = {}
    with ReadScope(engine) as conn:
        for status, last, n in conn.execute(query).all():
            state = session_state(status, last)
            counts[state] = counts.get(state, 0) + int(n)
    return counts
