"""The sweep's team step: stale claims released after a bound (DESIGN.md section 8).

A commit point of the system, not of a session owner (no fence), like the
sweeper's other writes: each team with a stale claim is changed in one
transaction that locks its team row first (``ports.TeamLedger``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import OutboxRecord
from nahida_workers.core.team_gate import wakes_after, with_tasks
from nahida_workers.core.teams import (
    LogAction,
    TaskLogEntry,
    TaskStatus,
    TeamState,
    TeamTask,
    release_due,
    stale,
)
from nahida_workers.ports import Clock, TeamLedger
from nahida_workers.runtime.commits.team import TeamCommitLedger
from nahida_workers.runtime.teams.wakes import apply_wakes, log_entry

__all__ = ["release_stale_claims"]

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[OutboxRecord]], None]


def release_stale_claims(
    ledger: TeamCommitLedger[Any],
    teams: TeamLedger[Any],
    clock: Clock,
    *,
    bound_s: float,
    publish: Publish,
) -> list[tuple[str, str]]:
    """The sweep's team step: release claims whose holder ended or lost ownership.

    DESIGN.md section 8: a claim is released after a bound.  A stale claim
    (``core.teams.stale``) is first marked (``stale_since``), and released by
    a later sweep once ``bound_s`` seconds have passed since -- unless its
    holder's next owner renewed it meanwhile (every update here is
    conditional on the same claim, still stale).  Returns ``(team, task)``
    pairs released now.
    """
    by_team: dict[str, list[TeamTask]] = defaultdict(list)
    for task in teams.claimed_tasks():
        by_team[task.team_id].append(task)
    released: list[tuple[str, str]] = []
    for team_id in sorted(by_team):
        snapshot = teams.read_team(team_id)
        if snapshot is None or not any(
            stale(t, snapshot.member(t.owner or "")) for t in snapshot.tasks
        ):
            continue
        released += _release_team(ledger, teams, clock, snapshot, bound_s=bound_s, publish=publish)
    return released


def _release_team(
    ledger: TeamCommitLedger[Any],
    teams: TeamLedger[Any],
    clock: Clock,
    snapshot: TeamState,
    *,
    bound_s: float,
    publish: Publish,
) -> list[tuple[str, str]]:
    """Mark or release one team's stale claims in one transaction under its lock."""
    now = clock.now()
    team_id = snapshot.team_id
    released: list[tuple[str, str]] = []
    with ledger.transaction() as tx:
        teams.lock_team(tx, team_id, lead_id=snapshot.lead_id, root_id=snapshot.root_id, at=now)
        state = teams.read_team(team_id, tx) or snapshot
        changed: list[TeamTask] = []
        entries: list[TaskLogEntry] = []
        for task in state.tasks:
            holder = state.member(task.owner or "")
            if not stale(task, holder) or task.owner is None or task.claim_epoch is None:
                continue
            owner, epoch = task.owner, task.claim_epoch
            if task.stale_since is None:
                teams.mark_stale(tx, team_id, task.task_id, owner=owner, claim_epoch=epoch, at=now)
            elif release_due(task, now=now, bound_s=bound_s) and teams.release_task(
                tx, team_id, task.task_id, owner=owner, claim_epoch=epoch, at=now
            ):
                ended = holder is None or holder.status is SessionStatus.DONE
                why = "holder ended" if ended else "holder lost ownership"
                entries.append(
                    log_entry(
                        state,
                        task.task_id,
                        LogAction.RELEASED,
                        now,
                        member=task.owner,
                        epoch=task.claim_epoch,
                        reason=why,
                    )
                )
                changed.append(replace(task, status=TaskStatus.OPEN, owner=None, claim_epoch=None))
                released.append((team_id, task.task_id))
        records: list[OutboxRecord] = []
        if changed:
            teams.log(tx, entries)
            version = teams.bump_version(tx, team_id, at=now)
            after = with_tasks(state, changed, version=version)
            wakes = wakes_after(state, after, actor=None)
            records = apply_wakes(ledger, teams, tx, after, wakes, now)
    for team, task_id in released:
        log.warning("team %s: task %s released (its claim went stale)", team, task_id)
    publish(records)
    return released
