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
    TaskLogEntry,
    TaskStatus,
    TeamMember,
    TeamRole,
    TeamTask,
    WaitingOn,
)
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.parts import forward
from nahida_workers.ledger.rules import storable
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import SqlTx, conflict_insert
from nahida_workers.ledger.sql_team_reads import SqlTeamReads

__all__ = ["SqlTeams"]

_tt = t.team_tasks.c
_tm = t.team_members.c
_s = t.sessions.c


class SqlTeams:
    """Teams on a SQL ledger (see :class:`nahida_workers.ports.TeamLedger`).

    The writes are here; the reads are its part ``reads``
    (:class:`~.sql_team_reads.SqlTeamReads`), forwarded.
    """

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger
        self.reads = SqlTeamReads(ledger)

    read_team = forward("reads", SqlTeamReads.read_team)
    team_of = forward("reads", SqlTeamReads.team_of)
    task_log = forward("reads", SqlTeamReads.task_log)
    claimed_tasks = forward("reads", SqlTeamReads.claimed_tasks)
    todos = forward("reads", SqlTeamReads.todos)

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
        """ONE conditional ``UPDATE``: the claim (or its renewal) with every rule in its WHERE.

        The task's dependency ids are read first: they never change after the
        task is created, so the read cannot go stale; their *statuses* are
        checked inside the ``UPDATE`` (no dependency may be anything but ``done``).
        """
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
