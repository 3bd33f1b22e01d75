"""The sweeper (celery beat): repair what crashes leave behind (DESIGN.md section 1).

* Outbox rows a crash left unpublished are published.
* A session marked ``running`` whose lease is gone has lost its owner
  (SIGKILL, OOM, a host gone): once it has been quiet for
  ``redispatch_after_s`` it is dispatched again.  The next owner bumps the
  epoch, closes the orphan calls and continues from the ledger.
* A session still ``queued`` with no owner after ``redispatch_queued_after_s``
  lost its task message: a worker killed between taking the message off the
  queue and recording it unacknowledged (kombu's Redis transport does these
  in two steps) leaves it nowhere, and the broker never redelivers it (found
  by ``bench/chaos.py``).  It is dispatched again.
* After the broker lost its messages (detected by the caller, e.g. a Redis
  restart), queued sessions are dispatched again at once.
* A session that wrote nothing for ``settle_after_s`` and has no owner is
  settled ``failed/abandoned`` -- unless no owner ever took it (it waits in
  the queue or for a slot under its group's cap: waiting is not a crash).
* Team claims whose holder ended or lost ownership are released after a
  bound (``release_claims``, DESIGN.md section 8; ``runtime/commits/team.py``).
* Due timers -- the deadlines of waiting sessions -- are fired first
  (``fire_timers``, ``runtime/control/timers.py``): a parked parent whose
  wall-clock budget passed ends ``incomplete/budget_exhausted`` within one
  sweep interval, with no worker slot.
* A session deferred by its group's cap has no message queued on purpose:
  it is never re-dispatched; instead every group with deferred sessions is
  released as far as its cap has room (a crash between a seal and its
  release left them waiting; ``runtime/dispatch/admission.py``).

Re-dispatching is always safe: a duplicate delivery finds the lease held or
the session done and exits without writing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import Admission, SessionRecord
from nahida_workers.ledger.admission import admission_ledger
from nahida_workers.ports import Clock, LeaseStore, LedgerReader
from nahida_workers.runtime.dispatch.admission import free_slot
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.session import SessionRunner

__all__ = ["SweepReport", "Sweeper"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did."""

    outbox_published: int
    redispatched: tuple[str, ...]
    settled: tuple[str, ...] = ()
    broker_reset: bool = False
    released: int = 0
    claims_released: tuple[tuple[str, str], ...] = ()
    timers_fired: tuple[tuple[str, str], ...] = ()


@dataclass
class Sweeper:
    """One sweep over the ledger.

    Attributes:
        redispatch_after_s: seconds a ``running`` session must have been quiet
            (no lease, no status change) before it is dispatched again.
        redispatch_queued_after_s: the same for a ``queued`` session; longer,
            because its message may still wait behind a backlog (default: the
            broker's visibility timeout, past which Redis itself would have
            redelivered a message that was merely unacknowledged).
        settle_after_s: seconds an unfinished session may go without a single
            ledger write and without an owner before it is settled
            ``failed/abandoned`` (a crash loop, a poison session).
        broker_reset: returns True once after the broker lost its messages
            (a Redis restart without persistence): every unfinished session
            without an owner is then dispatched again at once.
        runner: settles stuck sessions (None: never settle).
        release_claims: the team step -- releases stale team claims after
            their bound and returns the ``(team, task)`` pairs released
            (None: no team step).
        fire_timers: the timer step -- fires the due deadlines of waiting
            sessions and returns ``(timer id, outcome)`` of each
            (``runtime/control/timers.py``; None: no timer step).
    """

    ledger: LedgerReader
    leases: LeaseStore
    dispatcher: Dispatcher
    clock: Clock
    redispatch_after_s: float = 60.0
    redispatch_queued_after_s: float = 300.0
    settle_after_s: float = 3600.0
    broker_reset: Callable[[], bool] = field(default=lambda: False)
    runner: SessionRunner | None = None
    release_claims: Callable[[], list[tuple[str, str]]] | None = None
    fire_timers: Callable[[], list[tuple[str, str]]] | None = None

    def sweep(self) -> SweepReport:
        """Publish the outbox, re-dispatch ownerless sessions, settle stuck ones."""
        published = self.dispatcher.publish_pending()
        # Deadlines first: they are the sweep's time-critical step (one sweep interval).
        timers = self.fire_timers() if self.fire_timers is not None else []
        now = self.clock.now()
        reset = self.broker_reset()
        if reset:
            log.warning("the broker lost its messages; re-dispatching every ownerless session")
        settled = self._settle(now)
        redispatched: list[str] = []
        after_s = {
            SessionStatus.QUEUED: self.redispatch_queued_after_s,
            SessionStatus.RUNNING: self.redispatch_after_s,
        }
        # Only the rows quiet long enough are read: behind a backlog of
        # thousands of queued sessions a sweep stays a few cheap queries.
        candidates = [
            session
            for status, quiet_for_s in after_s.items()
            for session in self.ledger.sessions(
                statuses=[status],
                updated_before=None if reset else now - timedelta(seconds=quiet_for_s),
            )
        ]
        for session in candidates:
            if session.session_id in settled or session.admission is Admission.DEFERRED:
                continue
            quiet_s = (now - session.updated_at).total_seconds()
            if self.leases.holder(session.session_id) is not None:
                continue
            log.warning(
                "session %s: %s with no lease owner for %.0fs; re-dispatching",
                session.session_id,
                session.status.value,
                quiet_s,
            )
            self.dispatcher.redispatch(session.session_id, touch_status=session.status)
            redispatched.append(session.session_id)
        released = self._release(now)
        claims = self.release_claims() if self.release_claims is not None else []
        return SweepReport(
            published,
            tuple(redispatched),
            tuple(settled),
            reset,
            released,
            tuple(claims),
            tuple(timers),
        )

    def _settle(self, now: datetime) -> list[str]:
        """Settle ownerless sessions with no progress for ``settle_after_s`` (never-owned: not)."""
        settled: list[str] = []
        if self.runner is None:
            return settled
        cutoff = now - timedelta(seconds=self.settle_after_s)
        for session_id in self.ledger.quiet_sessions(older_than=cutoff):
            session = self.ledger.get_session(session_id)
            if session is None or _never_owned(session) or session.admission is Admission.DEFERRED:
                continue  # waiting for a delivery or a slot (a backlog, a cap) is not stuck
            if self.leases.holder(session_id) is None and self.runner.settle(session_id):
                settled.append(session_id)
        return settled

    def _release(self, now: datetime) -> int:
        """Release deferred sessions of every group whose cap has room."""
        released = 0
        for group in admission_ledger(self.ledger).deferred_groups():
            released += free_slot(self.ledger, group, at=now, publish=self.dispatcher.publish)
        return released


def _never_owned(session: SessionRecord) -> bool:
    """Queued and never taken by an owner (its fencing epoch was never bumped)."""
    return session.status is SessionStatus.QUEUED and session.lease_epoch == 0
