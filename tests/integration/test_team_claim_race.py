"""N members claim the same open tasks at once on PostgreSQL: one owner per task, always.

DESIGN.md section 8: a claim is ONE conditional update fenced by the
claimant's session epoch.  Eight member threads, each through its own
session's claim commit point (``TeamCommits.claim``, real transactions on
the real server), go for the same tasks in the same order, released by one
barrier, while a checker thread samples the task rows over its own
connection.  The checker asserts at every sample that a claimed task has
exactly one owner and never changes owner; the final audit checks the claim
history: each task claimed exactly once, by the thread that was told it won,
and the losers' attempts recorded ``lost``.  Each winner completes its task
before its next claim (completions take the team lock: they race too).  One
member's session is taken over by a new owner in the middle: its old epoch
claims nothing afterwards.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import select

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.teams import Refused, TeamMember, TeamRole, TeamTask
from nahida_workers.errors import StaleEpochError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.ports import Fence, SystemClock
from nahida_workers.runtime.commits.team import TeamCommits
from tests.contract.ledger_world import make_world

pytestmark = pytest.mark.slow

LEAD = "race-lead"
MEMBERS = [f"race-m{i}" for i in range(8)]
TASKS = [f"t{i:02d}" for i in range(24)]


class _Alive:
    """The heartbeat of an owner that keeps its lease (the race is about the ledger)."""

    lost = False

    def check(self) -> None:
        """Never lost."""


def _team(pg: SqlLedger) -> dict[str, int]:
    clock = SystemClock()
    epochs: dict[str, int] = {}
    for sid in [LEAD, *MEMBERS]:
        make_world(pg, sid, f"run-{sid}")
        epochs[sid] = pg.bump_epoch(sid, at=clock.now())  # each session has a live owner
    teams = team_ledger(pg)
    now = clock.now()
    with pg.transaction() as tx:
        teams.lock_team(tx, LEAD, lead_id=LEAD, root_id=LEAD, at=now)
        for i, sid in enumerate(MEMBERS):
            teams.add_member(tx, TeamMember(LEAD, sid, TeamRole.MEMBER, f"w{i}", "worker", now))
        for seq, task_id in enumerate(TASKS, start=1):
            teams.insert_task(
                tx,
                TeamTask(LEAD, task_id, task_id, now, now, seq=seq, created_by="x", root_id=LEAD),
            )
    return epochs


def _commits(pg: SqlLedger, sid: str, epoch: int) -> TeamCommits:
    return TeamCommits(
        pg,
        team_ledger(pg),
        SystemClock(),
        Fence(sid, epoch),
        _Alive(),  # type: ignore[arg-type]
        root_id=LEAD,
        publish=lambda _records: None,
    )


def test_n_members_racing_for_the_same_tasks_never_share_one(pg: SqlLedger) -> None:
    epochs = _team(pg)
    barrier = threading.Barrier(len(MEMBERS) + 1)
    won: dict[str, list[str]] = {sid: [] for sid in MEMBERS}
    stale_refusals: list[str] = []
    errors: list[BaseException] = []
    done = threading.Event()
    samples = Counter[str]()
    violations: list[str] = []
    taken_over = MEMBERS[0]

    def member(sid: str, explicit: bool) -> None:
        commits = _commits(pg, sid, epochs[sid])
        barrier.wait()
        try:
            for index, task_id in enumerate(TASKS):
                if sid == taken_over and index == len(TASKS) // 2:
                    pg.bump_epoch(sid, at=SystemClock().now())  # a new owner takes the session
                try:
                    got = commits.claim(LEAD, task_id if explicit else None)
                except StaleEpochError:
                    stale_refusals.append(sid)
                    continue
                if isinstance(got, Refused):
                    continue
                won[sid].append(got.task_id)
                # a member works one task at a time: settle it before the next claim
                settled = commits.complete(
                    LEAD, got.task_id, failed=False, result=f"by {sid}", receipt={}
                )
                assert not isinstance(settled, Refused), settled
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)

    def checker() -> None:
        owners: dict[str, str] = {}
        with pg.engine.connect() as conn:
            barrier.wait()
            while not done.is_set():
                rows = conn.execute(
                    select(
                        t.team_tasks.c.task_id, t.team_tasks.c.status, t.team_tasks.c.owner
                    ).where(t.team_tasks.c.team_id == LEAD)
                ).all()
                conn.rollback()  # a fresh snapshot per sample
                for task_id, status, owner in rows:
                    samples[status] += 1
                    if status in ("claimed", "done") and not owner:
                        violations.append(f"{task_id} claimed with no owner")
                    if owner is not None and owners.setdefault(task_id, owner) != owner:
                        violations.append(f"{task_id} owner changed {owners[task_id]} -> {owner}")

    threads = [
        threading.Thread(target=member, args=(sid, i % 2 == 0)) for i, sid in enumerate(MEMBERS)
    ]
    watcher = threading.Thread(target=checker)
    for thread in [*threads, watcher]:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    watcher.join(timeout=30)
    assert not errors, errors
    assert not violations, violations[:5]
    assert samples["claimed"] > 0, "the checker saw the race, not only its end"

    # final audit: rows, winners and the claim history agree -- one claim per task
    state = team_ledger(pg).read_team(LEAD)
    assert state is not None
    owners = {task.task_id: task.owner for task in state.tasks}
    winners: dict[str, list[str]] = {}
    for sid, tasks in won.items():
        for task_id in tasks:
            winners.setdefault(task_id, []).append(sid)
    assert sorted(winners) == TASKS, "every task was claimed"
    assert all(len(w) == 1 for w in winners.values()), winners
    assert owners == {task_id: w[0] for task_id, w in winners.items()}
    history = team_ledger(pg).task_log(LEAD)
    claimed = Counter(e.task_id for e in history if e.action.value == "claimed")
    assert claimed == Counter(dict.fromkeys(TASKS, 1))
    completed = Counter(e.task_id for e in history if e.action.value == "done")
    assert completed == Counter(dict.fromkeys(TASKS, 1))
    assert all(
        task.status.value == "done" and task.result == f"by {task.owner}" for task in state.tasks
    )
    assert all(owners[e.task_id] == e.member_id for e in history if e.action.value == "claimed")
    lost = [e for e in history if e.action.value == "lost"]
    assert lost, "some claim attempts lost a race"
    assert all(owners[e.task_id] != e.member_id for e in lost)
    # the session taken over: its old epoch is refused; its claims stay at the old epoch
    assert taken_over in stale_refusals
    assert all(e.epoch == epochs[taken_over] for e in history if e.member_id == taken_over)
    session = pg.get_session(taken_over)
    assert session is not None and session.status is SessionStatus.RUNNING
