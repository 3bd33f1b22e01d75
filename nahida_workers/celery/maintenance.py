"""The sweeper's broker check: was the broker's Redis restarted without its queue?"""

from __future__ import annotations

from datetime import datetime

from nahida_workers import metrics
from nahida_workers.constants import BROKER_RUN_ID_KEY
from nahida_workers.ports import FleetState
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.runtime.wiring import Fleet

__all__ = ["broker_reset", "run_id_changed", "sweep"]


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
    ).sweep()
    metrics.observe_sweep(report, current.ledger, current.leases)
    return {
        "outbox_published": report.outbox_published,
        "redispatched": list(report.redispatched),
        "settled": list(report.settled),
        "broker_reset": report.broker_reset,
        "released": report.released,
    }
