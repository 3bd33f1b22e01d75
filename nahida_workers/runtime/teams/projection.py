"""A team as a document, read from the ledger only (DESIGN.md section 8).

``nahida team show TEAM`` and ``GET /v1/teams/{team_id}`` print this: the
members with their states, the task graph with owners, and the claim
history.  No cache, no process state: what the ledger holds is what it shows.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.teams import TaskStatus, TeamMember, TeamState
from nahida_workers.errors import NotFoundError
from nahida_workers.ports import LedgerReader, TeamLedger

__all__ = ["member_state", "render_team", "team_document"]

#: Characters of a task's result a document carries.
RESULT_CHARS = 2000


def member_state(member: TeamMember, last_state: str | None = None) -> str:
    """What a member is doing, in a word.

    ``queued``, ``working``, ``parked (idle|tasks|members)``, ``waiting`` (on
    its own children), or the terminal state of its last run once it ended.
    """
    if member.status is SessionStatus.DONE:
        return last_state or "done"
    if member.status is SessionStatus.WAITING and member.waiting_on is not None:
        return f"parked ({member.waiting_on.value})"
    if member.status is SessionStatus.RUNNING:
        return "working"
    return member.status.value if member.status is not None else "unknown"


def team_document(
    ledger: LedgerReader, teams: TeamLedger[Any], team_id: str, *, history: bool = True
) -> dict[str, Any]:
    """The team as one JSON-able document (full ids).

    Returns:
        ``{"team_id", "lead_id", "root_id", "version", "settled", "counts":
        {status: n}, "members": [{"member_id", "name", "display_name", "role",
        "agent", "status", "state", "waiting_on", "todos": {"done", "total"}}],
        "tasks": [{"task_id", "title", "description", "depends_on", "status",
        "owner", "owner_name", "claim_epoch", "result", "receipt"}],
        "history": [{"task_id", "action", "member_id", "epoch", "at", "detail"}]}``.

    Raises:
        NotFoundError: no such team.
    """
    state = teams.read_team(team_id)
    if state is None:
        raise NotFoundError(f"no team {team_id}")
    names = {m.member_id: m.name for m in state.members}
    doc: dict[str, Any] = {
        "team_id": state.team_id,
        "lead_id": state.lead_id,
        "root_id": state.root_id,
        "version": state.version,
        "settled": state.settled,
        "counts": {s.value: sum(1 for t in state.tasks if t.status is s) for s in TaskStatus},
        "members": [_member(ledger, teams, m) for m in state.members],
        "tasks": [
            {
                "task_id": t.task_id,
                "title": t.title,
                "description": t.description,
                "depends_on": list(t.depends_on),
                "status": t.status.value,
                "owner": t.owner,
                "owner_name": names.get(t.owner or ""),
                "claim_epoch": t.claim_epoch,
                "result": (t.result or "")[:RESULT_CHARS] if t.result is not None else None,
                "receipt": dict(t.receipt) if t.receipt is not None else None,
            }
            for t in state.tasks
        ],
    }
    if history:
        doc["history"] = [
            {
                "task_id": e.task_id,
                "action": e.action.value,
                "member_id": e.member_id,
                "epoch": e.epoch,
                "at": e.at.isoformat(),
                "detail": dict(e.detail),
            }
            for e in teams.task_log(team_id)
        ]
    return doc


def _member(ledger: LedgerReader, teams: TeamLedger[Any], member: TeamMember) -> dict[str, Any]:
    last: str | None = None
    if member.status is SessionStatus.DONE:
        runs = ledger.runs_of(member.member_id)
        ended = [r for r in runs if r.terminal_state is not None]
        last = ended[-1].terminal_state.value if ended and ended[-1].terminal_state else None
    items, _ = teams.todos(member.member_id)
    return {
        "member_id": member.member_id,
        "name": member.name,
        "display_name": member.display_name,
        "role": member.role.value,
        "agent": member.agent,
        "status": member.status.value if member.status is not None else None,
        "state": member_state(member, last),
        "waiting_on": member.waiting_on.value if member.waiting_on is not None else None,
        "todos": {
            "done": sum(1 for i in items if i.get("status") == "completed"),
            "total": len(items),
        },
    }


def render_team(state: TeamState) -> str:
    """The team as the model sees it (``TeamTaskList``): members, then the graph."""
    counts = {s: sum(1 for t in state.tasks if t.status is s) for s in TaskStatus}
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items())
    lines = [f"Team {state.team_id} (lead {state.lead_id}): {len(state.tasks)} tasks: {summary}."]
    lines.append("Members (address them by member id):")
    for m in state.members:
        lines.append(f"- {m.member_id} {m.name} [{m.role.value}] {member_state(m)}")
    names = {m.member_id: m.name for m in state.members}
    lines.append("Tasks:")
    if not state.tasks:
        lines.append("- (none yet)")
    for t in state.tasks:
        owner = f" owner {names.get(t.owner, '?')} ({t.owner})" if t.owner else ""
        deps = f" after {', '.join(t.depends_on)}" if t.depends_on else ""
        line = f"- {t.task_id} [{t.status.value}] {t.title}{deps}{owner}"
        if t.result:
            line += f" -- result: {' '.join(t.result.split())[:300]}"
        lines.append(line)
    return "\n".join(lines)
