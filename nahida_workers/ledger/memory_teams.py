"""The in-memory twin of the team port (``ports.TeamLedger``, DESIGN.md section 8).

Composed over a :class:`~nahida_workers.ledger.memory.MemoryLedger`: it
writes in that ledger's transactions (one global lock: the twin of the team
row lock and of the claim's conditional update) and journals every write
for rollback.  Same rules and refusals as ``ledger/sql_teams.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import InboxMessage
from nahida_workers.core.teams import (
    TaskLogEntry,
    TaskStatus,
    TeamMember,
    TeamRole,
    TeamState,
    TeamTask,
    WaitingOn,
)
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger.memory import MemoryLedger, MemoryTx
from nahida_workers.ledger.rules import storable

__all__ = ["MemoryTeams"]


class MemoryTeams:
    """Teams over a memory ledger (see :class:`nahida_workers.ports.TeamLedger`)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._teams: dict[str, dict[str, Any]] = {}
        self._members: dict[str, TeamMember] = {}
        self._tasks: dict[str, TeamTask] = {}  # key "team\0task"
        self._log: dict[str, TaskLogEntry] = {}  # key: zero-padded entry number
        self._todos: dict[str, tuple[list[dict[str, str]], int]] = {}

    # -- writes -------------------------------------------------------------------
    def lock_team(
        self,
        tx: MemoryTx,
        team_id: str,
        *,
        lead_id: str,
        root_id: str,
        at: datetime,
        lock: bool = True,
    ) -> None:
        """Create the team row and its lead's member row if absent (the lock is global)."""
        if team_id in self._teams:
            return
        put = self.ledger.tables.put
        put(tx, self._teams, team_id, {"lead_id": lead_id, "root_id": root_id, "version": 0})
        if lead_id not in self._members:
            lead = TeamMember(team_id, lead_id, TeamRole.LEAD, "lead", "lead", at, root_id=root_id)
            put(tx, self._members, lead_id, lead)

    def add_member(self, tx: MemoryTx, member: TeamMember) -> bool:
        """Insert a member (idempotent by id); a name taken in the team is refused."""
        if member.member_id in self._members:
            return False
        if any(
            m.team_id == member.team_id and m.name == member.name for m in self._members.values()
        ):
            raise LedgerIntegrityError(f"member name {member.name!r} is taken in the team")
        self.ledger.tables.put(tx, self._members, member.member_id, member)
        return True

    def insert_task(self, tx: MemoryTx, task: TeamTask) -> None:
        """Insert a task row."""
        key = _key(task.team_id, task.task_id)
        if key in self._tasks:
            raise LedgerIntegrityError(f"task {task.task_id} exists")
        self.ledger.tables.put(tx, self._tasks, key, task)

    def claim_task(
        self,
        tx: MemoryTx,
        team_id: str,
        task_id: str,
        member_id: str,
        epoch: int,
        *,
        renew: bool,
        at: datetime,
    ) -> bool:
        """The conditional claim (or renewal), fenced by the member's epoch."""
        task = self._tasks.get(_key(team_id, task_id))
        session = self.ledger.tables.sessions.get(member_id)
        if task is None or session is None:
            return False
        if session.lease_epoch != epoch or session.status is SessionStatus.DONE:
            return False
        if renew:
            if task.status is not TaskStatus.CLAIMED or task.owner != member_id:
                return False
            changed = replace(task, claim_epoch=epoch, stale_since=None, updated_at=at)
        else:
            if task.status is not TaskStatus.OPEN or not self._deps_done(task):
                return False
            changed = replace(
                task,
                status=TaskStatus.CLAIMED,
                owner=member_id,
                claim_epoch=epoch,
                claimed_at=at,
                stale_since=None,
                updated_at=at,
            )
        self.ledger.tables.put(tx, self._tasks, _key(team_id, task_id), changed)
        return True

    def _deps_done(self, task: TeamTask) -> bool:
        for dep in task.depends_on:
            found = self._tasks.get(_key(task.team_id, dep))
            if found is None or found.status is not TaskStatus.DONE:
                return False
        return True

    def settle_task(
        self,
        tx: MemoryTx,
        team_id: str,
        task_id: str,
        *,
        owner: str | None,
        status: str,
        result: str,
        receipt: dict[str, Any] | None,
        at: datetime,
    ) -> bool:
        """Done/failed, conditional on the claim by ``owner`` (None: the task is open)."""
        task = self._tasks.get(_key(team_id, task_id))
        if task is None:
            return False
        if owner is None:
            if task.status is not TaskStatus.OPEN:
                return False
        elif task.status is not TaskStatus.CLAIMED or task.owner != owner:
            return False
        changed = replace(
            task, status=TaskStatus(status), result=result, receipt=receipt, updated_at=at
        )
        self.ledger.tables.put(tx, self._tasks, _key(team_id, task_id), changed)
        return True

    def mark_stale(
        self,
        tx: MemoryTx,
        team_id: str,
        task_id: str,
        *,
        owner: str,
        claim_epoch: int,
        at: datetime,
    ) -> bool:
        """Record ``stale_since`` on the same, still stale, claim."""
        task = self._same_stale_claim(team_id, task_id, owner, claim_epoch)
        if task is None or task.stale_since is not None:
            return False
        self.ledger.tables.put(
            tx, self._tasks, _key(team_id, task_id), replace(task, stale_since=at)
        )
        return True

    def release_task(
        self,
        tx: MemoryTx,
        team_id: str,
        task_id: str,
        *,
        owner: str,
        claim_epoch: int,
        at: datetime,
    ) -> bool:
        """The same, still stale, claim back to ``open``."""
        task = self._same_stale_claim(team_id, task_id, owner, claim_epoch)
        if task is None:
            return False
        released = replace(
            task,
            status=TaskStatus.OPEN,
            owner=None,
            claim_epoch=None,
            claimed_at=None,
            stale_since=None,
            updated_at=at,
        )
        self.ledger.tables.put(tx, self._tasks, _key(team_id, task_id), released)
        return True

    def _same_stale_claim(
        self, team_id: str, task_id: str, owner: str, claim_epoch: int
    ) -> TeamTask | None:
        task = self._tasks.get(_key(team_id, task_id))
        if task is None or task.status is not TaskStatus.CLAIMED:
            return None
        if task.owner != owner or task.claim_epoch != claim_epoch:
            return None
        session = self.ledger.tables.sessions.get(owner)
        holder_owns = (
            session is not None
            and session.status is not SessionStatus.DONE
            and session.lease_epoch <= claim_epoch
        )
        return None if holder_owns else task  # the holder still owns its session at that epoch

    def set_waiting(
        self, tx: MemoryTx, team_id: str, member_id: str, waiting_on: WaitingOn | None
    ) -> None:
        """Record why a team session parks."""
        member = self._members.get(member_id)
        if member is None or member.team_id != team_id:
            raise NotFoundError(f"no member {member_id} in team {team_id}")
        self.ledger.tables.put(tx, self._members, member_id, replace(member, waiting_on=waiting_on))

    def bump_version(self, tx: MemoryTx, team_id: str, *, at: datetime) -> int:
        """Increment the team's version."""
        row = self._teams.get(team_id)
        if row is None:
            raise NotFoundError(f"no team {team_id}")
        bumped = {**row, "version": row["version"] + 1}
        self.ledger.tables.put(tx, self._teams, team_id, bumped)
        return int(bumped["version"])

    def log(self, tx: MemoryTx, entries: Sequence[TaskLogEntry]) -> None:
        """Append to the claim history."""
        for entry in entries:
            self.ledger.tables.put(tx, self._log, f"{len(self._log):012d}", entry)

    def post_message(self, tx: MemoryTx, message: InboxMessage) -> bool:
        """Insert an inbox message, no limit (idempotent by id)."""
        tables = self.ledger.tables
        message = storable(message)
        if message.session_id not in tables.sessions:
            raise NotFoundError(f"no session {message.session_id}")
        if message.message_id in tables.inbox:
            return False
        tables.put(tx, tables.inbox, message.message_id, message)
        return True

    def park_team(self, tx: MemoryTx, session_id: str, *, at: datetime) -> bool:
        """``waiting`` under the session's own fence, unless a cancel was requested."""
        if tx.fence is None or tx.fence.session_id != session_id:
            raise LedgerIntegrityError("park needs the session's own fence")
        tables = self.ledger.tables
        session = tables.sessions[session_id]
        if session.cancel_requested_at is not None:
            return False
        parked = session.model_copy(update={"status": SessionStatus.WAITING, "updated_at": at})
        tables.put(tx, tables.sessions, session_id, parked)
        return True

    def save_todos(
        self,
        tx: MemoryTx,
        session_id: str,
        root_id: str,
        items: Sequence[dict[str, str]],
        *,
        at: datetime,
    ) -> int:
        """Replace the session's checklist; its new version."""
        version = self._todos.get(session_id, ([], 0))[1] + 1
        self.ledger.tables.put(tx, self._todos, session_id, ([dict(i) for i in items], version))
        return version

    # -- reads ------------------------------------------------------------------------
    def read_team(self, team_id: str, tx: MemoryTx | None = None) -> TeamState | None:
        """The team, its members with their sessions' state, and its tasks."""
        with self.ledger.tables.lock:
            row = self._teams.get(team_id)
            if row is None:
                return None
            members = sorted(
                (self._with_session(m) for m in self._members.values() if m.team_id == team_id),
                key=lambda m: (m.role is not TeamRole.LEAD, m.created_at, m.member_id),
            )
            tasks = sorted(
                (t for t in self._tasks.values() if t.team_id == team_id), key=lambda t: t.seq
            )
            return TeamState(
                team_id,
                row["lead_id"],
                row["root_id"],
                row["version"],
                tuple(members),
                tuple(tasks),
            )

    def _with_session(self, member: TeamMember) -> TeamMember:
        session = self.ledger.tables.sessions.get(member.member_id)
        if session is None:
            return member
        return replace(
            member,
            status=session.status,
            epoch=session.lease_epoch,
            session_updated_at=session.updated_at,
        )

    def team_of(self, session_id: str) -> TeamMember | None:
        """The member row of ``session_id``."""
        with self.ledger.tables.lock:
            member = self._members.get(session_id)
            return self._with_session(member) if member is not None else None

    def task_log(self, team_id: str) -> list[TaskLogEntry]:
        """The team's claim history, oldest first."""
        with self.ledger.tables.lock:
            return [e for _, e in sorted(self._log.items()) if e.team_id == team_id]

    def claimed_tasks(self) -> list[TeamTask]:
        """Every claimed task of every team."""
        with self.ledger.tables.lock:
            return [t for t in self._tasks.values() if t.status is TaskStatus.CLAIMED]

    def todos(self, session_id: str) -> tuple[list[dict[str, str]], int]:
        """The session's checklist and version."""
        with self.ledger.tables.lock:
            items, version = self._todos.get(session_id, ([], 0))
            return [dict(i) for i in items], version


def _key(team_id: str, task_id: str) -> str:
    return f"{team_id}\0{task_id}"
