"""Maintenance tasks run by celery beat: the sweeper."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis

from nahida_workers import metrics
from nahida_workers.ports import Ledger
from nahida_workers.runtime.sweeper import Sweeper
from tasks.app import app, fleet
from tasks.celeryconfig import SWEEP

__all__ = ["broker_reset", "run_id_changed", "sweep"]

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
    return run_id_changed(current.ledger, run_id, at=current.clock.now())


def run_id_changed(ledger: Ledger[Any], run_id: str, *, at: datetime) -> bool:
    """Record the broker's ``run_id``; True if it replaced a different one.

    The first id a fleet ever records is not a reset: there was no earlier
    broker to lose messages (a queued session whose message is missing for
    another reason is re-dispatched after ``redispatch_queued_after_s``).
    """
    previous = ledger.swap_fleet_value(BROKER_RUN_ID_KEY, run_id, at=at)
    return previous is not None and previous != run_id


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
    metrics.observe_sweep(report, current.ledger, current.leases)
    return {
        "outbox_published": report.outbox_published,
        "redispatched": list(report.redispatched),
        "settled": list(report.settled),
        "broker_reset": report.broker_reset,
    }
