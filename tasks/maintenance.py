"""Maintenance tasks run by celery beat: the sweeper."""

from __future__ import annotations

import redis

from nahida_workers.runtime.sweeper import Sweeper
from tasks.app import app, fleet
from tasks.celeryconfig import SWEEP

__all__ = ["broker_reset", "sweep"]

#: fleet_state key holding the broker's Redis run id.
BROKER_RUN_ID_KEY = "broker_redis_run_id"


def broker_reset() -> bool:
    """True when the broker's Redis is not the one the last sweep saw.

    A Redis restarted without persistence has lost every queued message; its
    ``run_id`` changes.  The id is kept in the ledger (not in Redis, which is
    what lost it).  Not a Redis broker: never.
    """
    current = fleet()
    url = current.settings.broker_url
    if not url.startswith(("redis://", "rediss://")):
        return False
    run_id = str(redis.Redis.from_url(url, socket_timeout=5).info("server")["run_id"])
    previous = current.ledger.swap_fleet_value(BROKER_RUN_ID_KEY, run_id, at=current.clock.now())
    return previous != run_id


@app.task(name=SWEEP, ignore_result=True)
def sweep() -> dict[str, object]:
    """One sweep: publish the outbox, re-dispatch ownerless sessions, settle stuck ones."""
    current = fleet()
    report = Sweeper(
        current.ledger,
        current.leases,
        current.dispatcher,
        current.clock,
        redispatch_after_s=current.settings.redispatch_after_s,
        redispatch_queued_after_s=current.settings.redispatch_queued_after_s,
        settle_after_s=current.settings.settle_after_s,
        broker_reset=broker_reset,
        runner=current.runner,
    ).sweep()
    return {
        "outbox_published": report.outbox_published,
        "redispatched": list(report.redispatched),
        "settled": list(report.settled),
        "broker_reset": report.broker_reset,
    }
