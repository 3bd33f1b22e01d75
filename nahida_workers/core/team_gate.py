"""When a team session may end, must park, or is woken (DESIGN.md section 8).

Pure decisions over a :class:`~nahida_workers.core.teams.TeamState`:

* :func:`team_gate` -- a team session's candidate answer that the completion
  pipeline would accept: a member with a claim it still holds, or with a
  claimable task, is told so (:class:`TeamNudge`, one more turn); an idle
  member *parks* until work or mail arrives; the lead parks until every
  task is settled and then until every member has ended
  (:class:`TeamWait`); otherwise the session ends as the pipeline decided.
* :func:`wakes_after` -- who a change of the graph wakes: idle members when
  a task became claimable, the lead when the graph became settled.
* :func:`wakes_for_park` -- the lead's wait for its members re-dispatches
  the idle ones, which then end (the graph is settled and the lead waits).

The runtime applies each decision under the team's lock, in the
transaction that made the change, so no wake-up is lost between a park and
the change that should end it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.teams import (
    TaskStatus,
    TeamRole,
    TeamState,
    TeamTask,
    WaitingOn,
    claimable_tasks,
    held_by,
)

__all__ = [
    "TeamNudge",
    "TeamView",
    "TeamWait",
    "Wake",
    "settle_text",
    "team_gate",
    "wakes_after",
    "wakes_for_park",
    "with_tasks",
]


@dataclass(frozen=True)
class TeamView:
    """The team of the session whose candidate answer the loop judges.

    Attributes:
        session_id: the session (the lead or a member).
        state: its team, read at this boundary.
    """

    session_id: str
    state: TeamState

    @property
    def role(self) -> TeamRole:
        """The session's role (a session missing from the rows is the lead)."""
        member = self.state.member(self.session_id)
        return member.role if member is not None else TeamRole.LEAD


@dataclass(frozen=True)
class TeamWait:
    """Park the session on its team: status ``waiting``, lease and slot released."""

    team_id: str
    waiting_on: WaitingOn


@dataclass(frozen=True)
class TeamNudge:
    """Tell the session about work it holds or can claim (a control event and its input)."""

    kind: str
    text: str


@dataclass(frozen=True)
class Wake:
    """Re-dispatch ``member_id``; with ``text``, post it to its inbox first (id ``message_id``)."""

    member_id: str
    message_id: str | None = None
    text: str | None = None


def team_gate(view: TeamView) -> TeamWait | TeamNudge | None:
    """What a team session's accepted candidate leads to (None: it ends).

    Rules (DESIGN.md section 8): a session never ends holding a claim; an
    idle member parks until work or mail arrives, and ends once the graph is
    settled and the lead waits for its members (or ended); the lead parks
    until every task is settled and every member has ended.
    """
    state = view.state
    held = held_by(state, view.session_id)
    if held:
        ids = [t.task_id for t in held]
        return TeamNudge(
            "held",
            f"You still hold claimed task(s) {ids}. Finish each one and record it with "
            "TeamTaskComplete (a result, and failed: true when it cannot be done).",
        )
    if view.role is TeamRole.LEAD:
        if not state.settled and not state.unfinished_members():
            return TeamNudge(
                "no_members",
                "Your team has unsettled tasks and no member left to do them: claim them "
                "yourself (TeamTaskClaim), or complete them as failed.",
            )
        if not state.settled:
            return TeamWait(state.team_id, WaitingOn.TASKS)
        if state.unfinished_members():
            return TeamWait(state.team_id, WaitingOn.MEMBERS)
        return None
    open_now = claimable_tasks(state)
    if open_now:
        listed = ", ".join(f"{t.task_id} ({t.title})" for t in open_now[:10])
        return TeamNudge(
            "claimable",
            f"Team tasks are claimable: {listed}. Claim one with TeamTaskClaim and do it.",
        )
    lead = state.lead
    lead_done = lead is None or lead.status is SessionStatus.DONE
    if state.settled and (lead_done or (lead is not None and lead.parked_on is WaitingOn.MEMBERS)):
        return None
    return TeamWait(state.team_id, WaitingOn.IDLE)


def with_tasks(state: TeamState, changed: Sequence[TeamTask], *, version: int) -> TeamState:
    """``state`` with ``changed`` tasks replaced (or appended), at ``version``."""
    by_id = {t.task_id: t for t in changed}
    tasks = [by_id.pop(t.task_id, t) for t in state.tasks]
    tasks.extend(by_id.values())
    return TeamState(
        state.team_id, state.lead_id, state.root_id, version, state.members, tuple(tasks)
    )


def wakes_after(before: TeamState, after: TeamState, *, actor: str | None) -> list[Wake]:
    """Who a change of the graph wakes (never ``actor``, who is running).

    * idle members, when a task became claimable (``work``): a message naming it;
    * the lead, when the graph went from unsettled to settled: the summary.
    """
    wakes: list[Wake] = []
    was = {t.task_id for t in claimable_tasks(before)}
    new = [t for t in claimable_tasks(after) if t.task_id not in was]
    if new:
        listed = ", ".join(f"{t.task_id} ({t.title})" for t in new[:10])
        for member in after.members:
            if (
                member.role is TeamRole.MEMBER
                and member.parked_on is WaitingOn.IDLE
                and member.member_id != actor
            ):
                wakes.append(
                    Wake(
                        member.member_id,
                        f"team:{after.team_id}:v{after.version}:work:{member.member_id}",
                        f"Team {after.team_id}: task(s) {listed} can be claimed now. Claim one "
                        "with TeamTaskClaim.",
                    )
                )
    lead = after.lead
    became_settled = bool(after.tasks) and not before.settled and after.settled
    if (
        became_settled
        and lead is not None
        and lead.member_id != actor
        and lead.status is not SessionStatus.DONE
    ):
        wakes.append(
            Wake(
                lead.member_id, f"team:{after.team_id}:v{after.version}:settled", settle_text(after)
            )
        )
    return wakes


def wakes_for_park(state: TeamState, waiting_on: WaitingOn) -> list[Wake]:
    """The lead's wait for its members re-dispatches the idle ones (no input: they end)."""
    if waiting_on is not WaitingOn.MEMBERS:
        return []
    return [
        Wake(m.member_id)
        for m in state.members
        if m.role is TeamRole.MEMBER and m.parked_on is WaitingOn.IDLE
    ]


def settle_text(state: TeamState) -> str:
    """The lead's wake-up input once the graph is settled: one line per task."""
    done = sum(1 for t in state.tasks if t.status is TaskStatus.DONE)
    lines = [
        f"All {len(state.tasks)} tasks of team {state.team_id} are settled: {done} done, "
        f"{len(state.tasks) - done} failed."
    ]
    names = {m.member_id: m.name for m in state.members}
    for task in state.tasks:
        owner = names.get(task.owner or "", task.owner or "nobody")
        excerpt = " ".join((task.result or "").split())[:200]
        lines.append(f"- {task.task_id} {task.status.value} by {owner}: {excerpt}")
    return "\n".join(lines)
