"""The mixed workload of a chaos run (``--mixed``): a busy fleet, the way teams run it.

Issue 21: batch, subagents and schedules each work on an idle fleet; a team
runs all three on one fleet, busy most of the time.  Besides the plan's own
sessions (parents with children among them: ``chaos_children``), a mixed
run puts on the same fleet, while the faults of ``chaos_faults`` hit it:

* a **backlog**: a big batch at priority 0 (``--backlog`` sessions, each a
  sleeping Bash then an answer), capped at half the fleet's slots
  (``max_running``, the ledger's admission), submitted at the start of the
  window; its Bash sleeps long enough that it drains over about the window,
  so the fleet is busy and a SIGTERM finds sessions mid-step to hand over;
* a **small batch** at priority 9 submitted behind it at a quarter of the
  window; its queue wait is submission to each session's first turn;
* a **schedule** every :data:`EVERY_S` seconds, decided by a real
  ``celery beat`` with the ledger-backed ``LedgerScheduler``
  (``nahida_workers/celery/beat.py``); it is removed when the window ends;
* **cancels** through the public cancel path (``Inbox.cancel``, what
  ``nahida cancel`` and the API call): of the 1st, 3rd, 5th ... parent once
  it has a child (the cancel cascades to the children), of one live child of
  each of the other parents, and of the last few backlog sessions (queued
  behind the cap);
* a **rolling SIGTERM restart** of every session worker (``chaos_faults``).

Cancel targets are never steered: a steering message after a seal starts a
new run, and the checks judge the run the cancel found.  The checks over
what this leaves are in ``chaos_control`` (checks 12-14 and the figures).
"""

from __future__ import annotations

import functools
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos_children import PARENT_EVERY, is_parent
from bench.chaos_rig import Plan, retry, say
from nahida_workers.constants import BATCH_GROUP_TEMPLATE
from nahida_workers.errors import UserError
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.schedules.model import FireOutcome, FireRecord, Overlap, ScheduleDef
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.backlog import scripted_job

__all__ = [
    "EVERY_S",
    "TICK_S",
    "Cancel",
    "Mixed",
    "MixedPlan",
    "beat_env",
    "cancels_parent",
    "describe",
    "is_cancel_target",
    "mixed_plan",
]

#: The schedule's period and beat's tick (``NAHIDA_SCHEDULE_TICK_S``), seconds.
EVERY_S = 3.0
TICK_S = 1.0
BIG_PRIORITY, SMALL_PRIORITY = 0, 9
#: Seconds a cancel waits for its parent to start a child before cancelling anyway.
CHILD_WAIT_S = 30.0
SCHEDULE_NAME = "chaos-mixed"


@dataclass(frozen=True)
class MixedPlan:
    """Sizes of the mixed workload."""

    backlog: int  # sessions of the big batch (priority 0)
    small: int  # sessions of the small batch (priority 9)
    cap: int  # max_running of the big batch
    queued_cancels: int  # backlog sessions cancelled while queued
    turn_s: float  # seconds each backlog session's Bash sleeps
    every_s: float = EVERY_S


def mixed_plan(plan: Plan, *, backlog: int | None = None) -> MixedPlan:
    """Scale the mixed workload with the plan: a backlog of 2 N (at least 40).

    Its turns (0.3-3 s) make it drain over about the window at its cap.
    """
    size = backlog if backlog is not None else max(40, 2 * plan.sessions)
    cap = max(1, plan.workers * plan.concurrency // 2)
    return MixedPlan(
        backlog=size,
        small=5,
        cap=cap,
        queued_cancels=max(2, size // 50),
        turn_s=round(min(3.0, max(0.3, plan.window_s * cap / max(1, size))), 2),
    )


def cancels_parent(i: int) -> bool:
    """For parent ``i``: cancel the parent itself (True) or one of its children (False)."""
    return (i // PARENT_EVERY) % 2 == 0


@dataclass(frozen=True)
class Cancel:
    """One ``Inbox.cancel`` call: whom, why, and the wall-clock times around it."""

    session_id: str
    kind: str  # "parent", "child" or "queued"
    before: datetime
    after: datetime
    refused_done: bool  # Inbox.cancel said the session was done already


@dataclass
class Mixed:
    """The mixed workload's state, shared by its threads and read by the checks."""

    plan: Plan
    sizes: MixedPlan
    dispatcher: Dispatcher
    inbox: Inbox
    store: SqlScheduleStore
    dsn: str
    repo: Path
    big_batch: str = ""
    small_batch: str = ""
    backlog_ids: list[str] = field(default_factory=list)
    small_ids: list[str] = field(default_factory=list)
    small_sent: datetime | None = None
    backlog_queued_at_small: int = -1
    cancels: list[Cancel] = field(default_factory=list)
    schedule_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schedule_removed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the schedule -------------------------------------------------------------
    def start_schedule(self) -> None:
        """Record the schedule; beat decides its fires from now on."""
        definition = ScheduleDef(
            name=SCHEDULE_NAME,
            job=scripted_job("fired", delay_s=0.1).model_dump(mode="json"),
            repos=(str(self.repo),),
            every_s=self.sizes.every_s,
            overlap=Overlap.ALLOW,
            catchup_window_s=120.0,
        )
        retry(
            lambda: self.store.put(definition, schedule_id=self.schedule_id, at=datetime.now(UTC)),
            what="put the schedule",
        )

    def stop_schedule(self) -> None:
        """Remove the schedule (no more fires), so the fleet can drain."""
        retry(lambda: self.store.remove(SCHEDULE_NAME, at=datetime.now(UTC)), what="remove")
        self.schedule_removed = True

    def fires(self) -> list[FireRecord]:
        """Every fire of the schedule, oldest first."""
        records = retry(lambda: self.store.fires(self.schedule_id, limit=100_000), what="fires")
        return sorted(records, key=lambda f: f.fire_time)

    def fires_open(self) -> bool:
        """Whether a fire is still being dispatched (or buffered).

        A dispatched fire stays "open" until a tick sees its sessions end,
        and no tick looks at a removed schedule: those sessions are waited
        for as sessions.
        """
        fires = retry(lambda: self.store.open_fires(self.schedule_id), what="open fires")
        waiting = (FireOutcome.DISPATCHING, FireOutcome.BUFFERED)
        return any(f.outcome in waiting for f in fires)

    # -- the batches --------------------------------------------------------------
    def _batch(
        self, name: str, cap: int | None, priority: int, count: int, spec: SessionSpec
    ) -> tuple[str, list[str]]:
        """Create a batch with ``cap``, submit ``count`` sessions at ``priority``; id and ids."""
        batch = retry(lambda: self.dispatcher.create_batch(name, {}), what=f"batch {name}").batch_id
        group = BATCH_GROUP_TEMPLATE.format(batch_id=batch)
        retry(lambda: self.dispatcher.set_cap(group, cap), what=f"cap of {name}")

        def one(n: int) -> str:
            submit = functools.partial(
                self.dispatcher.submit, spec, workspace=str(self.repo), batch_id=batch,
                idempotency_key=f"{batch}:{n}", priority=priority, admission_group=group,
            )  # fmt: skip
            session, _ = retry(submit, what=f"submit {name} {n}")
            return session.session_id

        with ThreadPoolExecutor(max_workers=4) as pool:
            return batch, list(pool.map(one, range(count)))

    def submit_backlog(self) -> None:
        """The big low-priority batch, capped at half the slots (its ids kept in order)."""
        self.big_batch, self.backlog_ids = self._batch(
            "backlog", self.sizes.cap, BIG_PRIORITY, self.sizes.backlog, backlog_spec(self.sizes)
        )
        say(f"mixed: backlog of {len(self.backlog_ids)} submitted (cap {self.sizes.cap})")

    def submit_small(self, stop: threading.Event) -> None:
        """The small high-priority batch, a quarter into the window (behind the backlog)."""
        if stop.wait(self.plan.window_s * 0.25):
            return
        self.backlog_queued_at_small = self._queued(self.backlog_ids)
        self.small_sent = datetime.now(UTC)
        self.small_batch, self.small_ids = self._batch(
            "small", None, SMALL_PRIORITY, self.sizes.small,
            scripted_job("small", delay_s=0.3).session_spec(),
        )  # fmt: skip
        say(f"mixed: small batch submitted; {self.backlog_queued_at_small} backlog still queued")

    def _queued(self, ids: list[str]) -> int:
        def count() -> int:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM sessions"
                    " WHERE session_id = ANY(%s) AND status = 'queued'",
                    (ids,),
                ).fetchone()
            return int(row[0]) if row else 0

        return retry(count, what="count queued")

    # -- the cancels --------------------------------------------------------------
    def cancel(self, session_id: str, kind: str) -> None:
        """``Inbox.cancel`` (retried through outages); a done session's refusal is recorded."""
        before = datetime.now(UTC)

        def call() -> bool:
            try:
                self.inbox.cancel(session_id)
            except UserError:  # done already (a NotFoundError would be a harness bug: raise)
                if self.inbox.ledger.get_session(session_id) is None:
                    raise
                return True
            return False

        refused = retry(call, what=f"cancel {session_id}")
        record = Cancel(session_id, kind, before, datetime.now(UTC), refused)
        with self.lock:
            self.cancels.append(record)
        say(f"mixed: cancelled {kind} {session_id}" + (" (was done)" if refused else ""))

    def _children(self, parent_id: str) -> list[tuple[str, str]]:
        """``(session id, status)`` of the parent's children, oldest first."""

        def read() -> list[tuple[str, str]]:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(
                    "SELECT session_id, status FROM sessions WHERE parent_id = %s"
                    " ORDER BY created_at, session_id",
                    (parent_id,),
                ).fetchall()
            return [(str(r[0]), str(r[1])) for r in rows]

        return retry(read, what=f"children of {parent_id}")

    def cancel_loop(self, submitted: list[str], stop: threading.Event) -> None:
        """Cancel parents and children as they spawn, then the last few backlog sessions.

        ``submitted`` is the plan's session ids in submission order (index i is
        session i).  A parent is cancelled once it has a child (or after
        :data:`CHILD_WAIT_S`); a child once its parent has one.
        """
        rng = random.Random(self.plan.seed + 2)
        queued_at = time.monotonic() + self.plan.window_s * 0.4
        queued_done = False
        for i in (i for i in range(self.plan.sessions) if is_parent(i)):
            while len(submitted) <= i:
                if stop.wait(0.1):
                    return
            parent = submitted[i]
            deadline = time.monotonic() + CHILD_WAIT_S
            kids = self._children(parent)
            while not kids and time.monotonic() < deadline:
                if stop.wait(0.2):
                    return
                kids = self._children(parent)
            if not queued_done and time.monotonic() >= queued_at:
                self.cancel_queued(stop)
                queued_done = True
            live = [sid for sid, status in kids if status != "done"]
            if cancels_parent(i) or not live:
                self.cancel(parent, "parent")
            else:
                self.cancel(rng.choice(live), "child")
        if not queued_done:
            while time.monotonic() < queued_at:
                if stop.wait(0.2):
                    return
            self.cancel_queued(stop)

    def cancel_queued(self, stop: threading.Event) -> None:
        """Cancel the last backlog sessions: queued behind the cap, as a person would."""
        while not self.backlog_ids:  # still being submitted
            if stop.wait(0.2):
                return
        for sid in self.backlog_ids[-self.sizes.queued_cancels :]:
            self.cancel(sid, "queued")


def backlog_spec(sizes: MixedPlan) -> SessionSpec:
    """A backlog session: a Bash that sleeps ``sizes.turn_s`` seconds, then "Done."."""
    call = {"id": "work", "name": "Bash", "arguments": {"command": f"sleep {sizes.turn_s:g}"}}
    return scripted_spec(
        [{"text": "Working.", "tool_calls": [call]}, {"text": "Done."}],
        prompt="Work through the backlog.",
        tools=("Bash",),
        limits={"bash_timeout_s": 30},
    )


def is_cancel_target(i: int) -> bool:
    """Whether plan session ``i`` may be cancelled (a parent): never steered."""
    return is_parent(i)


def describe(sizes: MixedPlan) -> str:
    """One line: the mixed workload's sizes."""
    return (
        f"mixed: backlog {sizes.backlog} at priority {BIG_PRIORITY} (cap {sizes.cap}, "
        f"{sizes.turn_s:g}s turns), "
        f"small batch {sizes.small} at priority {SMALL_PRIORITY}, schedule every "
        f"{sizes.every_s:g}s (tick {TICK_S:g}s), {sizes.queued_cancels} queued cancels"
    )


def beat_env(redispatch_after_s: float, redispatch_queued_after_s: float) -> dict[str, Any]:
    """Environment of the fleet's processes for a mixed run: beat ticks and sweeps quickly."""
    return {
        "NAHIDA_SCHEDULE_TICK_S": str(TICK_S),
        "NAHIDA_SWEEPER_INTERVAL_S": "2",
        "NAHIDA_REDISPATCH_AFTER_S": str(redispatch_after_s),
        "NAHIDA_REDISPATCH_QUEUED_AFTER_S": str(redispatch_queued_after_s),
    }
