"""Every commit point of a team session, by name (DESIGN.md section 8).

==================  ==================================================================
commit point        what it writes, in one transaction
==================  ==================================================================
``create_task``     the team row locked, the fence; the task, its history line and the
                    wake-ups of idle members it gives work to
``claim``           the fence only; ONE conditional update per task tried (the rules
                    are in its WHERE), a history line per claim won or lost
``complete``        the team row locked, the fence; the task ``done``/``failed`` (the
                    open tasks that depend on a failed one fail with it), history,
                    wake-ups: idle members given work, the lead once all is settled
``send``            the team row locked, the fence; the message in the recipient's
                    inbox (no limit, idempotent by id) and its wake-up
``park``            the team row locked, the fence; the gate re-checked on what is
                    committed; the ``parked`` event, ``sessions.status = waiting`` and
                    why (``waiting_on``); the lead's wait for its members re-dispatches
                    the idle ones
``write_todos``     the fence; the session's checklist, replaced whole
==================  ==================================================================

The sweep's team step (no fence: the system's write) is in
``runtime/commits/team_release.py``.

Lock order (``ports.TeamLedger``): the team row first, then the acting
session's row; a team change never locks another session's row.  Because
the park and every change that could end it take the team row first, a
wake-up is never lost between them.  Outbox rows written here are published
after commit (an unpublished one is re-published by the sweeper).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.core.events import Event, EventType, SessionStatus
from nahida_workers.core.facts import Timer
from nahida_workers.core.records import OutboxRecord
from nahida_workers.core.state import RunState
from nahida_workers.core.team_gate import (
    TeamView,
    TeamWait,
    Wake,
    team_gate,
    wakes_after,
    wakes_for_park,
    with_tasks,
)
from nahida_workers.core.teams import (
    Completion,
    LogAction,
    NewTask,
    Refused,
    TaskLogEntry,
    TaskStatus,
    TeamState,
    TeamTask,
    claim_order,
    decide_complete,
    decide_new_task,
    held_by,
)
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger.control import control_ledger
from nahida_workers.ports import (
    Clock,
    Fence,
    LedgerOutbox,
    LedgerReader,
    LedgerWriter,
    TeamLedger,
    TxT,
)
from nahida_workers.runtime.commits.pause_points import pause_point
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.runtime.teams.wakes import apply_wakes, log_entry

__all__ = ["TeamCommitLedger", "TeamCommits"]

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[OutboxRecord]], None]


class TeamCommitLedger(LedgerWriter[TxT], LedgerOutbox[TxT], LedgerReader, Protocol[TxT]):
    """The ledger ports the team commit points use."""


class TeamCommits:
    """The team commit points of one owned session (see the module docstring).

    Args:
        ledger / teams / clock: the ports.
        fence: the session and the epoch its owner bumped (DESIGN.md section 4).
        heartbeat: the lease heartbeat, checked before each commit.
        root_id: the session's tree root (every team row carries it).
        publish: publishes the outbox rows a commit wrote, after it.
    """

    def __init__(
        self,
        ledger: TeamCommitLedger[Any],
        teams: TeamLedger[Any],
        clock: Clock,
        fence: Fence,
        heartbeat: Heartbeat,
        *,
        root_id: str,
        publish: Publish,
    ) -> None:
        self.ledger = ledger
        self.teams = teams
        self.clock = clock
        self.fence = fence
        self.heartbeat = heartbeat
        self.root_id = root_id
        self.publish = publish

    # -- the one transaction shape of a team change ---------------------------------
    def _change(
        self,
        team_id: str,
        change: Callable[[Any, TeamState, datetime], tuple[Any, list[Wake]]],
    ) -> Any:
        """Team row, then the fence; ``change`` decides and writes; wake-ups; publish after.

        ``change(tx, state, now)`` returns ``(value, wakes)`` and must have
        bumped the team's version when it changed anything (wake-ups are
        keyed by it).

        Raises:
            LeaseLostError / StaleEpochError: this owner lost the session.
            LedgerUnavailableError: the ledger failed (the tool reports it).
        """
        self.heartbeat.check()
        now = self.clock.now()
        with self.ledger.transaction() as tx:
            self.teams.lock_team(tx, team_id, lead_id=team_id, root_id=self.root_id, at=now)
            self.ledger.lock_session(tx, self.fence.session_id, self.fence.epoch)
            state = self.teams.read_team(team_id, tx)
            if state is None:
                raise NotFoundError(f"no team {team_id}")
            value, wakes = change(tx, state, now)
            records: list[OutboxRecord] = []
            if wakes:
                current = self.teams.read_team(team_id, tx) or state
                records = apply_wakes(self.ledger, self.teams, tx, current, wakes, now)
        self.publish(records)
        return value

    # -- the graph --------------------------------------------------------------------
    def create_task(
        self,
        team_id: str,
        *,
        task_id: str,
        title: str,
        description: str,
        depends_on: Sequence[str],
        created_by: str,
    ) -> NewTask | Refused:
        """A task into the graph (idempotent by ``created_by``); the idle members it feeds wake."""
        me = self.fence.session_id

        def change(tx: Any, state: TeamState, now: datetime) -> tuple[Any, list[Wake]]:
            decided = decide_new_task(
                state,
                task_id=task_id,
                title=title,
                description=description,
                depends_on=depends_on,
                created_by=created_by,
                at=now,
            )
            if isinstance(decided, Refused) or decided.existing:
                return decided, []
            self.teams.insert_task(tx, decided.task)
            action = LogAction.FAILED if decided.task.status is TaskStatus.FAILED else None
            entries = [log_entry(state, task_id, LogAction.CREATED, now, member=me)]
            if action is not None:
                entries.append(log_entry(state, task_id, action, now, reason="dependency failed"))
            self.teams.log(tx, entries)
            version = self.teams.bump_version(tx, state.team_id, at=now)
            after = with_tasks(state, [decided.task], version=version)
            return decided, wakes_after(state, after, actor=me)

        result: NewTask | Refused = self._change(team_id, change)
        return result

    def claim(self, team_id: str, task_id: str | None) -> TeamTask | Refused:
        """Claim ``task_id`` (or the next task): ONE conditional update per task tried.

        No team lock: a claim never makes work appear, so it wakes nobody.
        The order comes from a snapshot (``core.teams.claim_order``); each
        update re-checks every rule itself, so a stale snapshot only costs a
        lost attempt (logged ``lost``).
        """
        self.heartbeat.check()
        me, epoch = self.fence.session_id, self.fence.epoch
        snapshot = self.teams.read_team(team_id)
        if snapshot is None:
            return Refused("your team has no tasks yet", "no_team")
        order = claim_order(snapshot, me, task_id)
        if isinstance(order, Refused):
            return order
        held = {t.task_id for t in held_by(snapshot, me)}
        pause_point("team_claim")  # test-only, inert by default: claimants that read one
        now = self.clock.now()  # snapshot race for the same task (a real-process test)
        won: str | None = None
        entries: list[TaskLogEntry] = []
        with self.ledger.transaction(fence=self.fence) as tx:
            for candidate in order:
                renewed = candidate in held and self.teams.claim_task(
                    tx, team_id, candidate, me, epoch, renew=True, at=now
                )
                if renewed or self.teams.claim_task(
                    tx, team_id, candidate, me, epoch, renew=False, at=now
                ):
                    action = LogAction.REFENCED if renewed else LogAction.CLAIMED
                    entries.append(
                        log_entry(snapshot, candidate, action, now, member=me, epoch=epoch)
                    )
                    won = candidate
                    break
                entries.append(
                    log_entry(snapshot, candidate, LogAction.LOST, now, member=me, epoch=epoch)
                )
            self.teams.log(tx, entries)
        if won is None:
            return Refused(
                f"another member claimed {order if len(order) > 1 else order[0]} first; "
                "list the team and claim another task",
                "lost",
            )
        task = snapshot.task(won)
        assert task is not None
        return replace(task, status=TaskStatus.CLAIMED, owner=me, claim_epoch=epoch)

    def complete(
        self,
        team_id: str,
        task_id: str,
        *,
        failed: bool,
        result: str,
        receipt: dict[str, Any],
    ) -> Completion | Refused:
        """Settle a task ``me`` holds; its failure fails its open dependents; wake-ups."""
        me, epoch = self.fence.session_id, self.fence.epoch

        def change(tx: Any, state: TeamState, now: datetime) -> tuple[Any, list[Wake]]:
            decided = decide_complete(state, me, task_id, failed=failed, result=result)
            if isinstance(decided, Refused):
                return decided, []
            status = decided.status.value
            if not self.teams.settle_task(
                tx,
                team_id,
                task_id,
                owner=me,
                status=status,
                result=result,
                receipt=receipt,
                at=now,
            ):
                return Refused(f"task {task_id} is not claimed by you", "not_owner"), []
            action = LogAction.DONE if decided.status is TaskStatus.DONE else LogAction.FAILED
            entries = [log_entry(state, task_id, action, now, member=me, epoch=epoch)]
            by_id = state.by_id()
            changed = [replace(by_id[task_id], status=decided.status, result=result)]
            why = f"dependency {task_id} failed"
            for doomed in decided.cascade:
                if self.teams.settle_task(
                    tx,
                    team_id,
                    doomed,
                    owner=None,
                    status="failed",
                    result=why,
                    receipt=None,
                    at=now,
                ):
                    entries.append(log_entry(state, doomed, LogAction.FAILED, now, reason=why))
                    changed.append(replace(by_id[doomed], status=TaskStatus.FAILED, result=why))
            self.teams.log(tx, entries)
            version = self.teams.bump_version(tx, team_id, at=now)
            after = with_tasks(state, changed, version=version)
            return decided, wakes_after(state, after, actor=me)

        done: Completion | Refused = self._change(team_id, change)
        return done

    # -- the mailbox --------------------------------------------------------------------
    def send(self, team_id: str, to: str, text: str, message_id: str) -> str | Refused:
        """A message into a member's inbox (idempotent by ``message_id``); wakes it if parked.

        Returns the recipient's member id.  ``to`` is a member id (or
        ``lead``); a display name is never an address (DESIGN.md section 8).
        """
        me = self.fence.session_id

        def change(tx: Any, state: TeamState, now: datetime) -> tuple[Any, list[Wake]]:
            target = state.lead_id if to == "lead" else to
            recipient = state.member(target)
            if recipient is None:
                known = ", ".join(f"{m.member_id} ({m.name})" for m in state.members)
                return Refused(f"no member {to!r} in this team; members: {known}", "unknown"), []
            if recipient.member_id == me:
                return Refused("a message to yourself is not sent", "self"), []
            if recipient.status is SessionStatus.DONE:
                return Refused(f"member {recipient.member_id} has ended", "ended"), []
            sender = state.member(me)
            label = f"{sender.name} ({me})" if sender is not None else me
            self.teams.bump_version(tx, team_id, at=now)
            wake = Wake(recipient.member_id, message_id, f"Message from {label}: {text}")
            return recipient.member_id, [wake]

        sent: str | Refused = self._change(team_id, change)
        return sent

    # -- parking ------------------------------------------------------------------------
    def park(
        self, state: RunState, run_id: str, wait: TeamWait, *, timer: Timer | None = None
    ) -> bool:
        """Park on the team, unless what is committed says otherwise (returns False).

        ``timer``: the run's wall-clock budget, armed in the park's
        transaction (``core/facts.py``; beat fires it while the session waits).

        Under the team row lock and the fence: a pending input, a cancel, or
        a gate that no longer says ``wait`` refuses the park (the loop then
        decides again).  A lead that waits for its members re-dispatches the
        idle ones, which then end.
        """
        me = self.fence.session_id
        event: list[Event] = []

        def change(tx: Any, team: TeamState, now: datetime) -> tuple[Any, list[Wake]]:
            if tx.cancel_requested or tx.pending_inbox:
                return False, []
            if team_gate(TeamView(me, team)) != wait:
                return False, []
            if not self.teams.park_team(tx, me, at=now):
                return False, []
            self.teams.set_waiting(tx, team.team_id, me, wait.waiting_on)
            parked = Event(
                run_id=run_id,
                sequence=state.next_sequence,
                type=EventType.CONTROL,
                payload={
                    "kind": "parked",
                    "team": team.team_id,
                    "waiting_on": wait.waiting_on.value,
                },
                created_at=now,
            )
            self.ledger.append(tx, [parked])
            if timer is not None:
                control_ledger(self.ledger).set_timer(tx, timer)
            event.append(parked)
            self.teams.bump_version(tx, team.team_id, at=now)
            return True, wakes_for_park(team, wait.waiting_on)

        parked: bool = self._change(wait.team_id, change)
        if parked:
            state.apply(event[0])
        return parked

    # -- the checklist ------------------------------------------------------------------
    def write_todos(self, items: Sequence[dict[str, str]]) -> int:
        """Replace this session's checklist (fenced); its new version."""
        self.heartbeat.check()
        with self.ledger.transaction(fence=self.fence) as tx:
            return self.teams.save_todos(
                tx, self.fence.session_id, self.root_id, items, at=self.clock.now()
            )
