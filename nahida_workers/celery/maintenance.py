"""The sweeper's broker check: was the broker's Redis restarted without its queue?"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from nahida_workers import metrics
from nahida_workers.constants import BROKER_RUN_ID_KEY
from nahida_workers.core.records import OutboxRecord
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.ports import FleetState
from nahida_workers.runtime.commits.team_release import release_stale_claims
from nahida_workers.runtime.control.cancel import Canceller
from nahida_workers.runtime.control.timers import TimerFirer
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.runtime.wiring import Fleet

__all__ = ["broker_reset", "fire_timers", "run_id_changed", "sweep"]

log = logging.getLogger(__name__)


def broker_reset(current: Fleet) -> bool:
    """True when the broker's Redis is not the one the last sweep saw.

    A Redis restarted without persistence has lost every queued message; its
    ``run_id`` changes.  The id is kept in the ledger (not in Redis, which is
    what lost it).  Not a Redis broker: never.
    """
    url = current.settings.broker_url
    if not url.startswith(("redis://", "rediss://")):
        return False
    import redis

    run_id = str(redis.Redis.from_url(url, socket_timeout=5).info("server")["run_id"])
    return run_id_changed(current.ledger, run_id, at=current.clock.now())


def run_id_changed(ledger: FleetState, run_id: str, *, at: datetime) -> bool:
    """Record the broker's ``run_id``; True if it replaced a different one.

    The first id a fleet ever records is not a reset: there was no earlier
    broker to lose messages (a queued session whose message is missing for
    another reason is re-dispatched after ``redispatch_queued_after_s``).
    """
    previous = ledger.swap_fleet_value(BROKER_RUN_ID_KEY, run_id, at=at)
    return previous is not None and previous != run_id


def _publish_each(current: Fleet, records: Sequence[OutboxRecord]) -> None:
    """Publish outbox rows a sweep step wrote; a broker error leaves one to the next sweep."""
    for record in records:
        try:
            current.dispatcher.publish(record)
        except Exception as exc:
            log.warning("outbox %s not published (the next sweep will): %s", record.outbox_id, exc)


def sweep(current: Fleet) -> dict[str, object]:
    """One sweep: publish the outbox, re-dispatch ownerless sessions, settle stuck ones."""
    report = Sweeper(
        current.ledger,
        current.leases,
        current.dispatcher,
        current.clock,
        redispatch_after_s=current.settings.redispatch_after_s,
        redispatch_queued_after_s=current.settings.redispatch_queued_after_s,
        settle_after_s=current.settings.settle_after_s,
        broker_reset=lambda: broker_reset(current),
        runner=current.runner,
        release_claims=lambda: release_stale_claims(
            current.ledger,
            team_ledger(current.ledger),
            current.clock,
            bound_s=current.settings.team_release_after_s,
            publish=lambda records: _publish_each(current, records),
        ),
        fire_timers=lambda: fire_timers(current),
    ).sweep()
    metrics.observe_sweep(report, current.ledger, current.leases)
    return {
        "outbox_published": report.outbox_published,
        "redispatched": list(report.redispatched),
        "settled": list(report.settled),
        "broker_reset": report.broker_reset,
        "released": report.released,
        "claims_released": [list(pair) for pair in report.claims_released],
        "timers_fired": [list(pair) for pair in report.timers_fired],
    }


def fire_timers(current: Fleet) -> list[tuple[str, str]]:
    """Fire the due timers of waiting sessions (``runtime/control/timers.py``)."""
    canceller = Canceller(
        current.ledger,
        current.leases,
        current.dispatcher,
        current.clock,
        current.runner.inbox_limits,
        current.runner.sink,
    )
    return TimerFirer(canceller).fire_due()
