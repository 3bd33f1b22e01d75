"""Teams as values: the task graph, its members and the rules of a claim (DESIGN.md section 8).

A team is a lead session plus member sessions (child sessions of the lead)
sharing a task graph and a mailbox in the ledger.  This module holds the
rows as frozen values and every rule the graph obeys, as pure functions the
runtime calls under the team's lock and the ledger adapters re-check in
their conditional updates:

* a task is *claimable* when it is ``open`` and every dependency is
  ``done`` (:func:`claimable`); a claim names its claimant by member id,
  never by display name, and is fenced by the claimant's session epoch;
* a claim is *stale* when its holder's session ended or its fencing epoch
  moved past the claim's (:func:`stale`); the sweep releases a stale claim
  once it has been seen stale for a bound (:func:`release_due`);
* completing needs a result and the claim (:func:`decide_complete`); a
  failed task fails every open task that depends on it
  (:func:`cascade_failures`), so a graph always settles;
* a team is *settled* when every task is ``done`` or ``failed``.

Nothing here does I/O, reads a clock or draws an id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from nahida_workers.core.events import SessionStatus

__all__ = [
    "MAX_TASKS",
    "TASK_ID",
    "Completion",
    "LogAction",
    "NewTask",
    "Refused",
    "TaskLogEntry",
    "TaskStatus",
    "TeamMember",
    "TeamRole",
    "TeamState",
    "TeamTask",
    "WaitingOn",
    "cascade_failures",
    "claim_order",
    "claimable",
    "claimable_tasks",
    "decide_complete",
    "decide_new_task",
    "held_by",
    "release_due",
    "settled",
    "stale",
    "unique_name",
]

#: Tasks one team may hold (a bound, not a design size).
MAX_TASKS = 500
#: What a task id looks like: short, stable, safe in a message and a shell.
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Longest member name (names are labels; ids address members).
MAX_NAME = 64


class TaskStatus(StrEnum):
    """``open`` -> ``claimed`` -> ``done`` | ``failed``; a stale claim goes back to ``open``."""

    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"

    @property
    def settled(self) -> bool:
        """``done`` or ``failed``: nothing more happens to the task."""
        return self in (TaskStatus.DONE, TaskStatus.FAILED)


class TeamRole(StrEnum):
    """The lead (the session that started the members) or a member."""

    LEAD = "lead"
    MEMBER = "member"


class WaitingOn(StrEnum):
    """Why a team session is parked (``sessions.status = waiting``).

    ``idle``: a member with nothing claimable, until work or mail arrives;
    ``tasks``: the lead, until every task is settled; ``members``: the lead,
    after the graph settled, until every member has ended.
    """

    IDLE = "idle"
    TASKS = "tasks"
    MEMBERS = "members"


class LogAction(StrEnum):
    """One line of a task's history (``team_task_log``)."""

    CREATED = "created"
    CLAIMED = "claimed"  # open -> claimed
    REFENCED = "refenced"  # the holder's next owner renewed its own claim
    LOST = "lost"  # a claim attempt another claimant won
    RELEASED = "released"  # a stale claim went back to open (the sweep)
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class TeamTask:
    """One node of the task graph (``team_tasks`` row).

    Attributes:
        team_id / task_id: the key; ``task_id`` matches :data:`TASK_ID`.
        depends_on: task ids that must be ``done`` before this one is claimable.
        owner: the member id holding (or that completed) the task.
        claim_epoch: the holder's session epoch at its claim (the fence).
        stale_since: when the sweep first saw the claim stale (None: not stale).
        result: the completing member's result text.
        receipt: the receipt behind the result: ``{"run_id", "call_id",
            "evidence": [{"call_id", "tool_name", "status"}, ...]}``.
        created_by: ``run_id:call_id`` of the creating call (idempotency).
        seq: the task's place in its team's creation order (1, 2, ...).
    """

    team_id: str
    task_id: str
    title: str
    created_at: datetime
    updated_at: datetime
    description: str = ""
    depends_on: tuple[str, ...] = ()
    status: TaskStatus = TaskStatus.OPEN
    owner: str | None = None
    claim_epoch: int | None = None
    claimed_at: datetime | None = None
    stale_since: datetime | None = None
    result: str | None = None
    receipt: Mapping[str, Any] | None = None
    created_by: str = ""
    seq: int = 0
    root_id: str = ""


@dataclass(frozen=True)
class TeamMember:
    """A team's lead or member (``team_members`` row, with its session's state).

    Attributes:
        member_id: the session id; members are addressed by it.
        name: unique within the team (``display_name`` made unique, see
            :func:`unique_name`); a label, never an address.
        agent: the agent profile the member was started with (None: the lead).
        waiting_on: why it is parked, when it is (None otherwise).
        status / epoch / session_updated_at: its session's status, fencing
            epoch and last status change (read with the row).
    """

    team_id: str
    member_id: str
    role: TeamRole
    name: str
    display_name: str
    created_at: datetime
    agent: str | None = None
    waiting_on: WaitingOn | None = None
    status: SessionStatus | None = None
    epoch: int = 0
    session_updated_at: datetime | None = None
    root_id: str = ""

    @property
    def parked_on(self) -> WaitingOn | None:
        """Why it is parked on the team: ``waiting_on`` while its session is ``waiting``.

        A session woken by anything else (its status moved on) is not parked,
        whatever ``waiting_on`` still says.
        """
        return self.waiting_on if self.status is SessionStatus.WAITING else None


@dataclass(frozen=True)
class TaskLogEntry:
    """One line of the claim history (``team_task_log``), written in the change's transaction."""

    team_id: str
    task_id: str
    action: LogAction
    at: datetime
    member_id: str | None = None
    epoch: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    root_id: str = ""


@dataclass(frozen=True)
class TeamState:
    """A team read in one snapshot: its members (lead first) and its tasks (creation order)."""

    team_id: str
    lead_id: str
    root_id: str
    version: int = 0
    members: tuple[TeamMember, ...] = ()
    tasks: tuple[TeamTask, ...] = ()

    @property
    def lead(self) -> TeamMember | None:
        """The lead's row, if it has one yet."""
        return next((m for m in self.members if m.role is TeamRole.LEAD), None)

    def member(self, member_id: str) -> TeamMember | None:
        """The member (or lead) with this id."""
        return next((m for m in self.members if m.member_id == member_id), None)

    def task(self, task_id: str) -> TeamTask | None:
        """The task with this id."""
        return next((t for t in self.tasks if t.task_id == task_id), None)

    def by_id(self) -> dict[str, TeamTask]:
        """Tasks by id."""
        return {t.task_id: t for t in self.tasks}

    @property
    def settled(self) -> bool:
        """Every task is ``done`` or ``failed`` (true of an empty graph)."""
        return settled(self.tasks)

    def unfinished_members(self) -> list[str]:
        """Members (not the lead) whose session has not ended."""
        return [
            m.member_id
            for m in self.members
            if m.role is TeamRole.MEMBER and m.status is not SessionStatus.DONE
        ]


@dataclass(frozen=True)
class Refused:
    """A team operation the rules refuse: ``text`` is what the model sees."""

    text: str
    code: str = "refused"


@dataclass(frozen=True)
class NewTask:
    """A task to insert (``existing``: this very call created it already: idempotent)."""

    task: TeamTask
    existing: bool = False


@dataclass(frozen=True)
class Completion:
    """A completion to apply: the task's new status and the tasks that fail with it."""

    task_id: str
    status: TaskStatus
    cascade: tuple[str, ...] = ()


def settled(tasks: Iterable[TeamTask]) -> bool:
    """Every task is ``done`` or ``failed``."""
    return all(t.status.settled for t in tasks)


def claimable(task: TeamTask, by_id: Mapping[str, TeamTask]) -> bool:
    """``open`` with every dependency ``done`` (the rule a claim's conditional update checks)."""
    if task.status is not TaskStatus.OPEN:
        return False
    return all(
        (d := by_id.get(dep)) is not None and d.status is TaskStatus.DONE for dep in task.depends_on
    )


def claimable_tasks(state: TeamState) -> list[TeamTask]:
    """The claimable tasks of ``state``, in creation order."""
    by_id = state.by_id()
    return [t for t in state.tasks if claimable(t, by_id)]


def held_by(state: TeamState, member_id: str) -> list[TeamTask]:
    """The tasks ``member_id`` holds claimed."""
    return [t for t in state.tasks if t.status is TaskStatus.CLAIMED and t.owner == member_id]


def decide_new_task(
    state: TeamState,
    *,
    task_id: str,
    title: str,
    description: str,
    depends_on: Sequence[str],
    created_by: str,
    at: datetime,
) -> NewTask | Refused:
    """A task to create, the one this call created already, or why not.

    Dependencies must exist when the task is created, so the graph is
    acyclic by construction (a task can only depend on older ones).
    """
    existing = state.task(task_id)
    if existing is not None:
        if existing.created_by == created_by:
            return NewTask(existing, existing=True)
        return Refused(f"task id {task_id!r} already exists in this team", "task_exists")
    if not TASK_ID.match(task_id):
        return Refused(
            f"task id {task_id!r} must be 1-64 of letters, digits, '.', '_' or '-'", "bad_id"
        )
    if not title.strip():
        return Refused("a task needs a non-empty title", "bad_title")
    if len(state.tasks) >= MAX_TASKS:
        return Refused(f"this team already holds its maximum of {MAX_TASKS} tasks", "too_many")
    deps = tuple(dict.fromkeys(depends_on))
    missing = [d for d in deps if state.task(d) is None]
    if task_id in deps:
        return Refused(f"task {task_id!r} cannot depend on itself", "bad_dependency")
    if missing:
        return Refused(
            f"unknown dependencies {missing}: create a task before the tasks that need it",
            "bad_dependency",
        )
    by_id = state.by_id()
    failed = [d for d in deps if by_id[d].status is TaskStatus.FAILED]
    task = TeamTask(
        team_id=state.team_id,
        task_id=task_id,
        title=title.strip(),
        description=description,
        depends_on=deps,
        created_by=created_by,
        created_at=at,
        updated_at=at,
        seq=max((t.seq for t in state.tasks), default=0) + 1,
        root_id=state.root_id,
    )
    if failed:  # born failed: it could never be claimed
        task = _failed(task, f"dependency {failed[0]} failed", at)
    return NewTask(task)


def _failed(task: TeamTask, why: str, at: datetime) -> TeamTask:
    return replace(task, status=TaskStatus.FAILED, result=why, updated_at=at)


def claim_order(state: TeamState, member_id: str, task_id: str | None) -> list[str] | Refused:
    """The task ids a claim tries, in order, each with one conditional update.

    With ``task_id``: that task, or why it cannot be claimed.  Without: the
    tasks the member already holds (its next owner renews them), then every
    claimable task in creation order.
    """
    if task_id is not None:
        task = state.task(task_id)
        if task is None:
            return Refused(f"no task {task_id!r} in this team", "unknown_task")
        if task.status is TaskStatus.CLAIMED and task.owner == member_id:
            return [task_id]
        if task.status is TaskStatus.CLAIMED:
            return Refused(f"task {task_id} is claimed by member {task.owner}", "claimed")
        if task.status.settled:
            return Refused(f"task {task_id} is already {task.status.value}", "settled")
        by_id = state.by_id()
        waiting = [d for d in task.depends_on if by_id[d].status is not TaskStatus.DONE]
        if waiting:
            return Refused(
                f"task {task_id} depends on unfinished task(s) {waiting}", "dependencies"
            )
        return [task_id]
    order = [t.task_id for t in held_by(state, member_id)]
    order += [t.task_id for t in claimable_tasks(state)]
    if not order:
        return Refused(_nothing_claimable(state), "nothing_claimable")
    return order


def _nothing_claimable(state: TeamState) -> str:
    if state.settled:
        return "No task is claimable: every task of the team is settled."
    blocked = [t.task_id for t in state.tasks if t.status is TaskStatus.OPEN]
    held = [t.task_id for t in state.tasks if t.status is TaskStatus.CLAIMED]
    return (
        f"No task is claimable now (claimed by others: {held or 'none'}; waiting on "
        f"dependencies: {blocked or 'none'})."
    )


def decide_complete(
    state: TeamState, member_id: str, task_id: str, *, failed: bool, result: str
) -> Completion | Refused:
    """Complete (or fail) a task ``member_id`` holds; a failure fails its dependents too."""
    if not result.strip():
        return Refused("completing a task needs a non-empty result", "no_result")
    task = state.task(task_id)
    if task is None:
        return Refused(f"no task {task_id!r} in this team", "unknown_task")
    if task.status.settled:
        return Refused(f"task {task_id} is already {task.status.value}", "settled")
    if task.status is not TaskStatus.CLAIMED or task.owner != member_id:
        holder = f"member {task.owner}" if task.status is TaskStatus.CLAIMED else "nobody"
        return Refused(
            f"task {task_id} is not claimed by you (held by {holder}); claim it first",
            "not_owner",
        )
    if not failed:
        return Completion(task_id, TaskStatus.DONE)
    return Completion(task_id, TaskStatus.FAILED, tuple(cascade_failures(state, task_id)))


def cascade_failures(state: TeamState, failed_id: str) -> list[str]:
    """Open tasks that depend on ``failed_id``, transitively, in creation order."""
    doomed = {failed_id}
    out: list[str] = []
    for task in state.tasks:  # creation order: a dependency always comes first
        if task.task_id in doomed:
            continue
        if task.status is TaskStatus.OPEN and doomed.intersection(task.depends_on):
            doomed.add(task.task_id)
            out.append(task.task_id)
    return out


def stale(task: TeamTask, holder: TeamMember | None) -> bool:
    """A claim whose holder's session ended or lost ownership (its epoch moved on).

    DESIGN.md section 8: a claim is fenced by the claimant's session epoch;
    a newer owner of that session renews it by claiming again (refenced).
    """
    if task.status is not TaskStatus.CLAIMED:
        return False
    if holder is None or holder.status is SessionStatus.DONE:
        return True
    return task.claim_epoch is None or holder.epoch > task.claim_epoch


def release_due(task: TeamTask, *, now: datetime, bound_s: float) -> bool:
    """The sweep releases a claim seen stale at least ``bound_s`` seconds ago."""
    return task.stale_since is not None and task.stale_since <= now - timedelta(seconds=bound_s)


def unique_name(taken: Iterable[str], display: str) -> str:
    """``display`` made unique among ``taken``: ``name``, ``name-2``, ``name-3`` ...

    Two members started with one display name get two names (and two ids).
    """
    base = " ".join(display.split())[: MAX_NAME - 4] or "member"
    used = set(taken)
    if base not in used:
        return base
    n = 2
    while f"{base}-{n}" in used:
        n += 1
    return f"{base}-{n}"
