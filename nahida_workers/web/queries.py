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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.engine import Engine

from nahida_workers.core.events import SessionStatus, TerminalState
from nahida_workers.core.teams import TaskStatus
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import ReadScope, utc

__all__ = [
    "PAGE_SIZE",
    "STATES",
    "BatchFilter",
    "Page",
    "SessionFilter",
    "TreeNode",
    "batch_page",
    "children_by_call",
    "distinct_jobs",
    "fire_page",
    "session_page",
    "session_state",
    "session_tree",
    "state_counts",
    "team_detail",
    "team_page",
]

#: Rows per page of every console list.
PAGE_SIZE = 25
#: Most sessions a session page draws in its tree.
TREE_LIMIT = 500
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


def _latest_state() -> Any:
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


def _count(engine: Engine, query: Select[Any]) -> int:
    with ReadScope(engine) as conn:
        return int(conn.execute(select(func.count()).select_from(query.subquery())).scalar_one())


def _page_number(page: int, total: int) -> int:
    return min(max(1, page), max(1, -(-total // PAGE_SIZE)))


def session_state(status: str, latest: str | None) -> str:
    """What a session shows: its status until done, then its latest run's terminal state."""
    if status != SessionStatus.DONE.value:
        return status
    return latest or status


def session_page(engine: Engine, flt: SessionFilter, *, page: int = 1) -> Page:
    """Sessions matching ``flt``, newest first, page ``page`` (1-based, clamped)."""
    s, b = t.sessions.c, t.batches.c
    latest = _latest_state().label("latest")
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
        .where(*_session_conditions(flt, _latest_state()))
    )
    total = _count(engine, query)
    number = _page_number(page, total)
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
    total = _count(engine, query)
    number = _page_number(page, total)
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


def team_page(engine: Engine, *, page: int = 1) -> Page:
    """Teams, newest first: lead, members, tasks by status."""
    tm, m, k = t.teams.c, t.team_members.c, t.team_tasks.c
    members = select(func.count()).where(m.team_id == tm.team_id).scalar_subquery()
    tasks = select(func.count()).where(k.team_id == tm.team_id).scalar_subquery()
    open_tasks = (
        select(func.count())
        .where(
            k.team_id == tm.team_id, k.status.in_([TaskStatus.OPEN.value, TaskStatus.CLAIMED.value])
        )
        .scalar_subquery()
    )
    query = select(
        tm.team_id,
        tm.lead_id,
        tm.created_at,
        tm.updated_at,
        members.label("members"),
        tasks.label("tasks"),
        open_tasks.label("open_tasks"),
    )
    total = _count(engine, query)
    number = _page_number(page, total)
    ordered = query.order_by(tm.created_at.desc(), tm.team_id.desc())
    with ReadScope(engine) as conn:
        rows = conn.execute(ordered.limit(PAGE_SIZE).offset((number - 1) * PAGE_SIZE)).all()
    return Page(
        [
            {
                "team_id": r.team_id,
                "lead_id": r.lead_id,
                "created_at": utc(r.created_at),
                "updated_at": utc(r.updated_at),
                "members": int(r.members),
                "tasks": int(r.tasks),
                "open_tasks": int(r.open_tasks),
            }
            for r in rows
        ],
        number,
        total,
    )


@dataclass
class TreeNode:
    """A session in its tree: its state and its children, oldest first."""

    session_id: str
    state: str
    workspace: str
    call_id: str | None
    children: list[TreeNode] = field(default_factory=list)


def session_tree(engine: Engine, session_id: str) -> TreeNode | None:
    """The subtree under ``session_id`` (at most :data:`TREE_LIMIT` sessions), or None.

    Reads the session's whole tree by ``root_id`` in one query (every row
    carries its root, DESIGN.md section 2) and keeps the part under it.
    """
    s = t.sessions.c
    with ReadScope(engine) as conn:
        root = conn.execute(select(s.root_id).where(s.session_id == session_id)).first()
        if root is None:
            return None
        root_id = root.root_id or session_id
        rows = conn.execute(
            select(
                s.session_id, s.parent_id, s.status, s.workspace, s.lineage_json, _latest_state()
            )
            .where((s.root_id == root_id) | (s.session_id == root_id))
            .order_by(s.created_at, s.session_id)
            .limit(TREE_LIMIT)
        ).all()
    nodes = {
        r[0]: TreeNode(
            r[0], session_state(r[2], r[5]), r[3], (r[4] or {}).get("call_id") if r[4] else None
        )
        for r in rows
    }
    for r in rows:
        if r[1] in nodes and r[0] != session_id:
            nodes[r[1]].children.append(nodes[r[0]])
    return nodes.get(session_id)


def children_by_call(engine: Engine, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """The direct children of ``session_id`` by the Task call that started them.

    Each child: ``session_id``, ``state``, ``created_at``, and its runs'
    ``(started_at, ended_at, terminal_state)`` spans (for the timeline's lanes).
    """
    s, r = t.sessions.c, t.agent_runs.c
    with ReadScope(engine) as conn:
        kids = conn.execute(
            select(s.session_id, s.status, s.created_at, s.lineage_json, _latest_state())
            .where(s.parent_id == session_id)
            .order_by(s.created_at, s.session_id)
            .limit(TREE_LIMIT)
        ).all()
        ids = [k.session_id for k in kids]
        runs = (
            conn.execute(
                select(r.session_id, r.started_at, r.ended_at, r.terminal_state)
                .where(r.session_id.in_(ids))
                .order_by(r.started_at)
            ).all()
            if ids
            else []
        )
    spans: dict[str, list[tuple[datetime, datetime | None, str | None]]] = {}
    for run in runs:
        spans.setdefault(run.session_id, []).append(
            (utc(run.started_at) or run.started_at, utc(run.ended_at), run.terminal_state)
        )
    out: dict[str, list[dict[str, Any]]] = {}
    for kid in kids:
        call = (kid.lineage_json or {}).get("call_id") or ""
        out.setdefault(str(call), []).append(
            {
                "session_id": kid.session_id,
                "state": session_state(kid.status, kid[4]),
                "created_at": utc(kid.created_at),
                "runs": spans.get(kid.session_id, []),
            }
        )
    return out


def distinct_jobs(engine: Engine) -> Sequence[str]:
    """Every job name a batch was run with (the job filter's choices), sorted."""
    b = t.batches.c
    with ReadScope(engine) as conn:
        return [str(v) for v in conn.execute(select(b.job_name).distinct().order_by(b.job_name))]


def state_counts(engine: Engine, flt: SessionFilter) -> dict[str, int]:
    """How many sessions matching ``flt`` are in each shown state (a batch's summary)."""
    s = t.sessions.c
    latest = _latest_state()
    query = (
        select(s.status, latest.label("latest"), func.count())
        .where(*_session_conditions(flt, _latest_state()))
        .group_by(s.status, latest)
    )
    counts: dict[str, int] = {}
    with ReadScope(engine) as conn:
        for status, last, n in conn.execute(query).all():
            state = session_state(status, last)
            counts[state] = counts.get(state, 0) + int(n)
    return counts


def fire_page(engine: Engine, schedule_id: str, *, page: int = 1) -> Page:
    """A schedule's fires, newest first: each decision, its batch and who decided it."""
    f = t.schedule_fires.c
    query = select(t.schedule_fires).where(f.schedule_id == schedule_id)
    total = _count(engine, query)
    number = _page_number(page, total)
    ordered = query.order_by(f.fire_time.desc())
    with ReadScope(engine) as conn:
        rows = conn.execute(ordered.limit(PAGE_SIZE).offset((number - 1) * PAGE_SIZE)).all()
    return Page(
        [
            {
                "fire_time": utc(r.fire_time),
                "kind": r.kind,
                "outcome": r.outcome,
                "batch_id": r.batch_id,
                "decided_by": r.decided_by,
                "attempts": r.attempts,
                "late_s": (r.detail_json or {}).get("late_s"),
            }
            for r in rows
        ],
        number,
        total,
    )


def team_detail(engine: Engine, team_id: str) -> dict[str, Any] | None:
    """A team's row, its members (with their sessions' states) and its tasks; None if unknown."""
    tm, m, k, s = t.teams.c, t.team_members.c, t.team_tasks.c, t.sessions.c
    with ReadScope(engine) as conn:
        team = conn.execute(select(t.teams).where(tm.team_id == team_id)).first()
        if team is None:
            return None
        members = conn.execute(
            select(
                m.member_id, m.role, m.name, m.display_name, m.waiting_on, s.status, _latest_state()
            )
            .select_from(t.team_members.outerjoin(t.sessions, s.session_id == m.member_id))
            .where(m.team_id == team_id)
            .order_by(m.created_at)
        ).all()
        tasks = conn.execute(
            select(k.task_id, k.title, k.status, k.owner, k.depends_on_json)
            .where(k.team_id == team_id)
            .order_by(k.task_id)
        ).all()
    return {
        "team_id": team.team_id,
        "lead_id": team.lead_id,
        "created_at": utc(team.created_at),
        "members": [
            {
                "member_id": r[0],
                "role": r[1],
                "name": r[2],
                "display_name": r[3],
                "waiting_on": r[4],
                "state": session_state(r[5], r[6]) if r[5] else "unknown",
            }
            for r in members
        ],
        "tasks": [
            {
                "task_id": r.task_id,
                "title": r.title,
                "status": r.status,
                "owner": r.owner,
                "depends_on": list(r.depends_on_json or []),
            }
            for r in tasks
        ],
    }
