"""What the effect interpreter asks of a session's team (DESIGN.md section 8).

At a candidate answer the pure loop needs the team as it is committed (a
:class:`~nahida_workers.core.team_gate.TeamView`); when the gate says
:class:`~nahida_workers.core.team_gate.TeamWait` the session parks through
the team commit point ``park``.  Only sessions that can be in a team get
one (a member, or a session whose tools include ``Task`` or a team tool),
and the team is read only at a candidate answer.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.facts import Timer
from nahida_workers.core.state import RunState
from nahida_workers.core.team_gate import TeamView, TeamWait
from nahida_workers.ports import TeamLedger
from nahida_workers.runtime.commits.team import TeamCommits

__all__ = ["TeamSession"]


class TeamSession:
    """One owned session's view of its team and its way to park on it.

    Args:
        teams: the team port.
        commits: the session's team commit points.
    """

    def __init__(self, teams: TeamLedger[Any], commits: TeamCommits) -> None:
        self.teams = teams
        self.commits = commits
        self.session_id = commits.fence.session_id

    def view(self) -> TeamView | None:
        """The session's team as committed, or None when it is in none."""
        member = self.teams.team_of(self.session_id)
        if member is None:
            return None
        state = self.teams.read_team(member.team_id)
        return TeamView(self.session_id, state) if state is not None else None

    def park(
        self, state: RunState, run_id: str, wait: TeamWait, *, timer: Timer | None = None
    ) -> bool:
        """Park on the team (True), or not when committed facts say otherwise.

        ``timer``: the run's budget, armed in the park's transaction.
        """
        return self.commits.park(state, run_id, wait, timer=timer)
