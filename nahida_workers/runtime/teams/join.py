"""A named ``Task`` child joins its parent's team, in the spawn's transaction (section 8).

The parent becomes the team's lead (the team's id is the parent's session
id) and the child a member: its member id is its session id (derived from
the parent's run and call, so stable across crashes), its name the
requested display name made unique within the team.  Only the lead adds
members, under its own fence (its session row lock), so two spawns never
race for a name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nahida_workers.core.teams import TeamMember, TeamRole, unique_name
from nahida_workers.ports import TeamLedger

__all__ = ["join_team", "member_name"]


def join_team(
    teams: TeamLedger[Any],
    tx: Any,
    *,
    lead_id: str,
    root_id: str,
    member_id: str,
    display_name: str,
    agent: str,
    at: datetime,
) -> str:
    """Make ``member_id`` a member of ``lead_id``'s team (idempotent); its unique name."""
    teams.lock_team(tx, lead_id, lead_id=lead_id, root_id=root_id, at=at, lock=False)
    state = teams.read_team(lead_id, tx)
    known = state.member(member_id) if state is not None else None
    if known is not None:
        return known.name
    taken = [m.name for m in state.members] if state is not None else []
    name = unique_name(taken, display_name)
    teams.add_member(
        tx,
        TeamMember(
            team_id=lead_id,
            member_id=member_id,
            role=TeamRole.MEMBER,
            name=name,
            display_name=display_name,
            created_at=at,
            agent=agent,
            root_id=root_id,
        ),
    )
    return name


def member_name(teams: TeamLedger[Any], member_id: str) -> str | None:
    """A member's unique name, or None when it is in no team."""
    member = teams.team_of(member_id)
    return member.name if member is not None and member.role is TeamRole.MEMBER else None
