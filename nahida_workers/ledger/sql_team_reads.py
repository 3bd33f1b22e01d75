"""The team port's reads on the SQL ledger (a part of ``ledger/sql_teams.py``).

The team with its members -- each joined with its session's status, epoch
and last change -- and its tasks in creation order; the claim history; the
claimed tasks the sweep looks at; checklists.  In the caller's transaction
when one is given (a decision under the team lock reads what it holds),
else on the read engine.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.teams import (
    LogAction,
    TaskLogEntry,
    TaskStatus,
    TeamMember,
    TeamRole,
    TeamState,
    TeamTask,
    WaitingOn,
)
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope, SqlTx, utc

__all__ = ["SqlTeamReads"]

_tt = t.team_tasks.c
_tm = t.team_members.c
_s = t.sessions.c


class SqlTeamReads:
    """Reads of the team tables (see :class:`nahida_workers.ports.TeamLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    def read_team(self, team_id: str, tx: SqlTx | None = None) -> TeamState | None:
        """The team, its members with their sessions' state, and its tasks (in ``tx`` if given)."""
        if tx is not None:
            return self._read_team(tx.conn, team_id)
        with ReadScope(self.ledger.reader) as conn:
            return self._read_team(conn, team_id)

    def _read_team(self, conn: Any, team_id: str) -> TeamState | None:
        row = conn.execute(select(t.teams).where(t.teams.c.team_id == team_id)).first()
        if row is None:
            return None
        members = conn.execute(
            _members_query().where(_tm.team_id == team_id).order_by(_tm.created_at, _tm.member_id)
        ).all()
        tasks = conn.execute(
            select(t.team_tasks).where(_tt.team_id == team_id).order_by(_tt.seq)
        ).all()
        found = sorted((_member(m) for m in members), key=lambda m: m.role is not TeamRole.LEAD)
        return TeamState(
            team_id,
            row.lead_id,
            row.root_id,
            int(row.version),
            tuple(found),
            tuple(_task(r) for r in tasks),
        )

    def team_of(self, session_id: str) -> TeamMember | None:
        """The member row of ``session_id`` (with its session's state)."""
        with ReadScope(self.ledger.reader) as conn:
            row = conn.execute(_members_query().where(_tm.member_id == session_id)).first()
        return _member(row) if row is not None else None

    def task_log(self, team_id: str) -> list[TaskLogEntry]:
        """The team's claim history, oldest first."""
        log = t.team_task_log.c
        with ReadScope(self.ledger.reader) as conn:
            rows = conn.execute(
                select(t.team_task_log).where(log.team_id == team_id).order_by(log.entry_id)
            ).all()
        return [
            TaskLogEntry(
                team_id=r.team_id,
                task_id=r.task_id,
                action=LogAction(r.action),
                at=utc(r.at),  # type: ignore[arg-type]
                member_id=r.member_id,
                epoch=r.epoch,
                detail=dict(r.detail_json or {}),
                root_id=r.root_id,
            )
            for r in rows
        ]

    def claimed_tasks(self) -> list[TeamTask]:
        """Every claimed task of every team."""
        with ReadScope(self.ledger.reader) as conn:
            rows = conn.execute(
                select(t.team_tasks)
                .where(_tt.status == TaskStatus.CLAIMED.value)
                .order_by(_tt.team_id, _tt.seq)
            ).all()
        return [_task(r) for r in rows]

    def todos(self, session_id: str) -> tuple[list[dict[str, str]], int]:
        """The session's checklist and version."""
        todo = t.session_todos.c
        with ReadScope(self.ledger.reader) as conn:
            row = conn.execute(
                select(todo.items_json, todo.version).where(todo.session_id == session_id)
            ).first()
        if row is None:
            return [], 0
        return [dict(i) for i in row.items_json or []], int(row.version)


def _members_query() -> Any:
    return select(
        t.team_members,
        _s.status.label("session_status"),
        _s.lease_epoch,
        _s.updated_at.label("session_updated_at"),
    ).select_from(t.team_members.outerjoin(t.sessions, _s.session_id == _tm.member_id))


def _member(row: Any) -> TeamMember:
    return TeamMember(
        team_id=row.team_id,
        member_id=row.member_id,
        role=TeamRole(row.role),
        name=row.name,
        display_name=row.display_name,
        created_at=utc(row.created_at),  # type: ignore[arg-type]
        agent=row.agent,
        waiting_on=WaitingOn(row.waiting_on) if row.waiting_on else None,
        status=SessionStatus(row.session_status) if row.session_status else None,
        epoch=int(row.lease_epoch or 0),
        session_updated_at=utc(row.session_updated_at),
        root_id=row.root_id,
    )


def _task(row: Any) -> TeamTask:
    return TeamTask(
        team_id=row.team_id,
        task_id=row.task_id,
        title=row.title,
        description=row.description,
        depends_on=tuple(str(d) for d in row.depends_on_json or ()),
        status=TaskStatus(row.status),
        owner=row.owner,
        claim_epoch=row.claim_epoch,
        claimed_at=utc(row.claimed_at),
        stale_since=utc(row.stale_since),
        result=row.result,
        receipt=dict(row.receipt_json) if row.receipt_json is not None else None,
        created_by=row.created_by,
        seq=int(row.seq),
        created_at=utc(row.created_at),  # type: ignore[arg-type]
        updated_at=utc(row.updated_at),  # type: ignore[arg-type]
        root_id=row.root_id,
    )
