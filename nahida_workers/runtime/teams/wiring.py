"""Binding a team session's tools and team view at the start of a delivery (section 8).

A session gets the team tools its spec names (``TeamTaskCreate`` ...,
``TodoWrite``) bound to its own fence, and -- when it can be in a team (a
member, or a session whose tools include ``Task`` or a team tool) -- a
:class:`~nahida_workers.runtime.teams.session.TeamSession` the effect
interpreter reads the team through at a candidate answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nahida_workers.core.children import TASK_TOOL
from nahida_workers.core.records import OutboxRecord, SessionRecord
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.runtime.commits.points import CommitPoints
from nahida_workers.runtime.commits.team import TeamCommits
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.teams.ops import SessionTeamOps
from nahida_workers.runtime.teams.session import TeamSession
from nahida_workers.tools.base import Tool
from nahida_workers.tools.team import SESSION_BOUND_TOOLS, TEAM_TOOLS, team_tools
from nahida_workers.tools.todo import TODO_WRITE, TodoWrite

if TYPE_CHECKING:
    from nahida_workers.runtime.ownership.delivery import DeliveryPorts

__all__ = ["TEAM_TOOL_NAMES", "TeamWiring", "team_wiring"]

log = logging.getLogger(__name__)

#: Tool names the runtime binds to the session itself (never built by name elsewhere).
TEAM_TOOL_NAMES = SESSION_BOUND_TOOLS


@dataclass(frozen=True)
class TeamWiring:
    """What a delivery gets for teams: the bound tools and the team session."""

    tools: tuple[Tool, ...]
    session: TeamSession | None


def team_wiring(
    runner: DeliveryPorts, session: SessionRecord, spec: SessionSpec, commits: CommitPoints
) -> TeamWiring | None:
    """The team tools and view of ``session``, or None when it has nothing to do with teams."""
    named = [t for t in spec.tools if t in TEAM_TOOL_NAMES]
    may_lead = TASK_TOOL in spec.tools or any(t in TEAM_TOOLS for t in named)
    if not named and not may_lead and session.parent_id is None:
        return None
    teams = team_ledger(runner.ledger)
    link = child_ledger(runner.ledger).link(session.session_id) if session.parent_id else None
    root = (link.root_id if link is not None else None) or session.session_id

    def publish(records: Sequence[OutboxRecord]) -> None:
        for record in records:
            if runner.publish is None:
                return
            try:
                runner.publish(record)
            except Exception as exc:  # the sweeper re-publishes it
                log.warning("outbox %s not published (the sweeper will): %s", record.outbox_id, exc)

    team_commits = TeamCommits(
        runner.ledger,
        teams,
        runner.clock,
        commits.fence,
        commits.heartbeat,
        root_id=root,
        publish=publish,
    )
    ops = SessionTeamOps(team_commits, teams, runner.ledger)
    tools: list[Tool] = team_tools(named, ops)
    if TODO_WRITE in named:
        tools.append(TodoWrite(ops))
    in_team = may_lead or (session.parent_id is not None and teams.team_of(session.session_id))
    return TeamWiring(tuple(tools), TeamSession(teams, team_commits) if in_team else None)
