"""The console's reads of trees and details: subtrees, children, teams, a schedule's fires.

Read-only, on the ledger's read engine, like :mod:`nahida_workers.web.queries`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from nahida_workers.core.teams import TaskStatus
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import ReadScope, utc
from nahida_workers.web.queries import (
    PAGE_SIZE,
    Page,
    count_rows,
    latest_state,
    page_number,
    session_state,
)

__all__ = [
    "TREE_LIMIT",
    "TreeNode",
    "children_by_call",
    "fire_page",
    "session_tree",
    "team_detail",
    "team_page",
]

#: Most sessions a session page draws in its tree.
TREE_LIMIT = 500


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
    total = count_rows(engine, query)
    number = page_number(page, total)
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
            select(s.session_id, s.parent_id, s.status, s.workspace, s.lineage_json, latest_state())
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
            select(s.session_id, s.status, s.created_at, s.lineage_json, latest_state())
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


def fire_page(engine: Engine, schedule_id: str, *, page: int = 1) -> Page:
    """A schedule's fires, newest first: each decision, its batch and who decided it."""
    f = t.schedule_fires.c
    query = select(t.schedule_fires).where(f.schedule_id == schedule_id)
    total = count_rows(engine, query)
    number = page_number(page, total)
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
                m.member_id, m.role, m.name, m.display_name, m.waiting_on, s.status, latest_state()
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
