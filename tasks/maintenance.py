"""Maintenance tasks run by celery beat: the sweeper."""

from __future__ import annotations

from nahida_workers.runtime.sweeper import Sweeper
from tasks.app import app, fleet
from tasks.celeryconfig import SWEEP

__all__ = ["sweep"]


@app.task(name=SWEEP, ignore_result=True)
def sweep() -> dict[str, object]:
    """One sweep: publish the outbox, re-dispatch sessions whose owner is gone."""
    current = fleet()
    report = Sweeper(
        current.ledger,
        current.leases,
        current.dispatcher,
        current.clock,
        redispatch_after_s=current.settings.redispatch_after_s,
    ).sweep()
    return {"outbox_published": report.outbox_published, "redispatched": list(report.redispatched)}
