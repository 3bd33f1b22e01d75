"""The sweeper (celery beat): repair what crashes leave behind (DESIGN.md section 1).

* Outbox rows a crash left unpublished are published.
* A session marked ``running`` whose lease is gone has lost its owner
  (SIGKILL, OOM, a host gone): once it has been quiet for
  ``redispatch_after_s`` it is dispatched again.  The next owner bumps the
  epoch, closes the orphan calls and continues from the ledger.

Re-dispatching is always safe: a duplicate delivery finds the lease held or
the session done and exits without writing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.ports import Clock, LeaseStore, Ledger
from nahida_workers.runtime.dispatcher import Dispatcher

__all__ = ["SweepReport", "Sweeper"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did."""

    outbox_published: int
    redispatched: tuple[str, ...]


@dataclass
class Sweeper:
    """One sweep over the ledger.

    Attributes:
        redispatch_after_s: seconds a running session must have been quiet
            (no lease, no status change) before it is dispatched again.
    """

    ledger: Ledger[Any]
    leases: LeaseStore
    dispatcher: Dispatcher
    clock: Clock
    redispatch_after_s: float = 60.0

    def sweep(self) -> SweepReport:
        """Publish the outbox, then re-dispatch abandoned running sessions."""
        published = self.dispatcher.publish_pending()
        now = self.clock.now()
        redispatched: list[str] = []
        for session in self.ledger.sessions(statuses=[SessionStatus.RUNNING]):
            quiet_s = (now - session.updated_at).total_seconds()
            if quiet_s < self.redispatch_after_s:
                continue
            if self.leases.holder(session.session_id) is not None:
                continue
            log.warning(
                "session %s: running with no lease owner for %.0fs; re-dispatching",
                session.session_id,
                quiet_s,
            )
            self.dispatcher.redispatch(session.session_id, touch_status=SessionStatus.RUNNING)
            redispatched.append(session.session_id)
        return SweepReport(published, tuple(redispatched))
