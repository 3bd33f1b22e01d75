"""The team port on the SQL ledger (``ports.TeamLedger``, DESIGN.md section 8).

Composed over a :class:`~nahida_workers.ledger.sql.SqlLedger`; writes run in
its transactions.  Lock order: a team change locks the ``teams`` row first
(``SELECT ... FOR UPDATE``), then its actor's session row (the fence); it
never locks a session row it only names (the team tables have no foreign
key to ``sessions``, and team mail is inserted without the inbox's
``FOR UPDATE`` of the recipient's row; the inbox's and the outbox's own
foreign keys take only a key-share lock), so a member's seal -- its own
row, then its parent's -- can never wait on a team change that waits on it.

A claim takes no team lock: it is ONE conditional ``UPDATE`` under the
claimant's fence.  Its ``WHERE`` holds every rule: the task is ``open``, no
dependency is anything but ``done``, and the claimant's session is at the
claim's epoch and not done.  On PostgreSQL two claims of one row serialise
on its row lock and the second re-checks ``status = 'open'`` on the new
version (READ COMMITTED's re-evaluation), so exactly one wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, insert, or_, select, update

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import InboxMessage, InboxStatus
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
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.rules import storable
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope, SqlTx, conflict_insert, utc

__all__ = ["SqlTeams"]

_tt = t.team_tasks.c
_tm = t.team_members.c
_s = t.sessions.c


class SqlTeams:
    """Teams on a SQL ledger (see :class:`nahida_workers.ports.TeamLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    # -- writes -------------------------------------------------------------------
    def lock_team(
        self,
        tx: SqlTx,
        team_id: str,
        *,
        lead_id: str,
        root_id: str,
        at: datetime,
        lock: bool = True,
    ) -> None:
        """Insert the team and its lead's member row if absent, then lock the team row."""
        insert_ = conflict_insert(self.ledger.pg)
        conn = tx.conn
        conn.execute(
            insert_(t.teams)
            .values(
                team_id=team_id,
                lead_id=lead_id,
                root_id=root_id,
                version=0,
                created_at=at,
                updated_at=at,
            )
            .on_conflict_do_nothing(index_elements=["team_id"])
        )
        if lock:
            conn.execute(
                select(t.teams.c.team_id).where(t.teams.c.team_id == team_id).with_for_update()
            )
        conn.execute(
            insert_(t.team_members)
            .values(
                member_id=lead_id,
                team_id=team_id,
                role=TeamRole.LEAD.value,
                name="lead",
                display_name="lead",
                agent=None,
                waiting_on=None,
                created_at=at,
                root_id=root_id,
            )
            .on_conflict_do_nothing(index_elements=["member_id"])
        )

    def add_member(self, tx: SqlTx, member: TeamMember) -> bool:
        """Insert a member row (idempotent by member id)."""
        conn = tx.conn
        if conn.execute(select(_tm.member_id).where(_tm.member_id == member.member_id)).first():
            return False
        conn.execute(
            insert(t.team_members).values(
                member_id=member.member_id,
                team_id=member.team_id,
                role=member.role.value,
                name=member.name,
                display_name=member.display_name,
                agent=member.agent,
                waiting_on=None,
                created_at=member.created_at,
                root_id=member.root_id,
            )
        )
        return True

    def insert_task(self, tx: SqlTx, task: TeamTask) -> None:
        """Insert a task row."""
        tx.conn.execute(
            insert(t.team_tasks).values(
                team_id=task.team_id,
                task_id=task.task_id,
                title=task.title,
                description=task.description,
                depends_on_json=list(task.depends_on),
                status=task.status.value,
                owner=task.owner,
                claim_epoch=task.claim_epoch,
                claimed_at=task.claimed_at,
                stale_since=None,
                result=task.result,
                receipt_json=dict(task.receipt) if task.receipt is not None else None,
                created_by=task.created_by,
                seq=task.seq,
                created_at=task.created_at,
                updated_at=task.updated_at,
                root_id=task.root_id,
            )
        )

    def claim_task(
        self,
        tx: SqlTx,
        team_id: str,
        task_id: str,
        member_id: str,
        epoch: int,
        *,
        renew: bool,
        at: datetime,
    ) -> bool:
        """ONE conditional ``UPDATE``: the claim (or its renewal) with every rule in its WHERE."""
        conn = tx.conn
        deps = conn.execute(
            select(_tt.depends_on_json).where(_tt.team_id == team_id, _tt.task_id == task_id)
        ).scalar()
        if deps is None:
            return False  # no such task
        fenced = exists().where(
            _s.session_id == member_id,
            _s.lease_epoch == epoch,
            _s.status != SessionStatus.DONE.value,
        )
        if renew:
            rule = and_(_tt.status == TaskStatus.CLAIMED.value, _tt.owner == member_id)
            values: dict[str, Any] = {"claim_epoch": epoch, "stale_since": None, "updated_at": at}
        else:
            dep = t.team_tasks.alias("dep")
            unfinished = exists().where(
                dep.c.team_id == team_id,
                dep.c.task_id.in_([str(d) for d in deps]),
                dep.c.status != TaskStatus.DONE.value,
            )
            rule = and_(_tt.status == TaskStatus.OPEN.value, ~unfinished)
            values = {
                "status": TaskStatus.CLAIMED.value,
                "owner": member_id,
                "claim_epoch": epoch,
                "claimed_at": at,
                "stale_since": None,
                "updated_at": at,
            }
        result = conn.execute(
            update(t.team_tasks)
            .where(_tt.team_id == team_id, _tt.task_id == task_id, rule, fenced)
            .values(**values)
        )
        return bool(result.rowcount == 1)

    def settle_task(
        self,
        tx: SqlTx,
        team_id: str,
        task_id: str,
        *,
        owner: str | None,
        status: str,
        result: str,
        receipt: dict[str, Any] | None,
        at: datetime,
    ) -> bool:
        """``done``/``failed``: conditional on the claim by ``owner`` (None: still ``open``)."""
        held = (
            _tt.status == TaskStatus.OPEN.value
            if owner is None
            else and_(_tt.status == TaskStatus.CLAIMED.value, _tt.owner == owner)
        )
        done = tx.conn.execute(
            update(t.team_tasks)
            .where(_tt.team_id == team_id, _tt.task_id == task_id, held)
            .values(status=status, result=result, receipt_json=receipt, updated_at=at)
        )
        return bool(done.rowcount == 1)

    def _still_stale(self, owner: str, claim_epoch: int) -> Any:
        """The holder's session ended or its epoch moved past the claim's."""
        return exists().where(
            _s.session_id == owner,
            or_(_s.status == SessionStatus.DONE.value, _s.lease_epoch > claim_epoch),
        ) | ~exists().where(_s.session_id == owner)

    def mark_stale(
        self, tx: SqlTx, team_id: str, task_id: str, *, owner: str, claim_epoch: int, at: datetime
    ) -> bool:
        """``stale_since = at`` on the same claim, still stale, not yet marked."""
        marked = tx.conn.execute(
            update(t.team_tasks)
            .where(
                _tt.team_id == team_id,
                _tt.task_id == task_id,
                _tt.status == TaskStatus.CLAIMED.value,
                _tt.owner == owner,
                _tt.claim_epoch == claim_epoch,
                _tt.stale_since.is_(None),
                self._still_stale(owner, claim_epoch),
            )
            .values(stale_since=at)
        )
        return bool(marked.rowcount == 1)

    def release_task(
        self, tx: SqlTx, team_id: str, task_id: str, *, owner: str, claim_epoch: int, at: datetime
    ) -> bool:
        """The same claim, still stale, back to ``open``."""
        released = tx.conn.execute(
            update(t.team_tasks)
            .where(
                _tt.team_id == team_id,
                _tt.task_id == task_id,
                _tt.status == TaskStatus.CLAIMED.value,
                _tt.owner == owner,
                _tt.claim_epoch == claim_epoch,
                self._still_stale(owner, claim_epoch),
            )
            .values(
                status=TaskStatus.OPEN.value,
                owner=None,
                claim_epoch=None,
                claimed_at=None,
                stale_since=None,
                updated_at=at,
            )
        )
        return bool(released.rowcount == 1)

    def set_waiting(
        self, tx: SqlTx, team_id: str, member_id: str, waiting_on: WaitingOn | None
    ) -> None:
        """Record why a team session parks."""
        changed = tx.conn.execute(
            update(t.team_members)
            .where(_tm.member_id == member_id, _tm.team_id == team_id)
            .values(waiting_on=waiting_on.value if waiting_on is not None else None)
        )
        if changed.rowcount != 1:
            raise NotFoundError(f"no member {member_id} in team {team_id}")

    def bump_version(self, tx: SqlTx, team_id: str, *, at: datetime) -> int:
        """Increment the team's version; the new value."""
        row = tx.conn.execute(
            update(t.teams)
            .where(t.teams.c.team_id == team_id)
            .values(version=t.teams.c.version + 1, updated_at=at)
            .returning(t.teams.c.version)
        ).first()
        if row is None:
            raise NotFoundError(f"no team {team_id}")
        return int(row[0])

    def log(self, tx: SqlTx, entries: Sequence[TaskLogEntry]) -> None:
        """Append to the claim history."""
        if not entries:
            return
        tx.conn.execute(
            insert(t.team_task_log),
            [
                {
                    "team_id": e.team_id,
                    "task_id": e.task_id,
                    "action": e.action.value,
                    "member_id": e.member_id,
                    "epoch": e.epoch,
                    "at": e.at,
                    "detail_json": dict(e.detail),
                    "root_id": e.root_id,
                }
                for e in entries
            ],
        )

    def post_message(self, tx: SqlTx, message: InboxMessage) -> bool:
        """Insert a pending inbox row (idempotent by id): no limit, no ``FOR UPDATE`` taken."""
        message = storable(message)
        conn = tx.conn
        if (
            conn.execute(select(_s.session_id).where(_s.session_id == message.session_id)).first()
            is None
        ):
            raise NotFoundError(f"no session {message.session_id}")
        inserted = conn.execute(
            conflict_insert(self.ledger.pg)(t.session_inbox)
            .values(
                message_id=message.message_id,
                session_id=message.session_id,
                kind=message.kind.value,
                text=message.text,
                size_bytes=message.size_bytes,
                status=InboxStatus.PENDING.value,
                next_turn=message.next_turn,
                created_at=message.created_at,
            )
            .on_conflict_do_nothing(index_elements=["message_id"])
            .returning(t.session_inbox.c.message_id)  # psycopg's rowcount is not reliable here
        ).first()
        return inserted is not None

    def park_team(self, tx: SqlTx, session_id: str, *, at: datetime) -> bool:
        """``waiting`` under the session's own fence, unless its cancel was requested."""
        if tx.fence is None or tx.fence.session_id != session_id:
            raise LedgerIntegrityError("park needs the session's own fence")
        parked = tx.conn.execute(
            update(t.sessions)
            .where(_s.session_id == session_id, _s.cancel_requested_at.is_(None))
            .values(status=SessionStatus.WAITING.value, awaiting_json=None, updated_at=at)
        )
        return bool(parked.rowcount == 1)

    def save_todos(
        self,
        tx: SqlTx,
        session_id: str,
        root_id: str,
        items: Sequence[dict[str, str]],
        *,
        at: datetime,
    ) -> int:
        """Replace the session's checklist; its new version."""
        todo = t.session_todos.c
        conn = tx.conn
        current = conn.execute(select(todo.version).where(todo.session_id == session_id)).scalar()
        rows = [dict(i) for i in items]
        if current is None:
            conn.execute(
                insert(t.session_todos).values(
                    session_id=session_id,
                    items_json=rows,
                    version=1,
                    updated_at=at,
                    root_id=root_id,
                )
            )
            return 1
        conn.execute(
            update(t.session_todos)
            .where(todo.session_id == session_id)
            .values(items_json=rows, version=todo.version + 1, updated_at=at)
        )
        return int(current) + 1

    # -- reads ------------------------------------------------------------------------
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
