"""The beat tick for user schedules (issue 14): thin, the ledger decides.

``celery -A tasks beat`` sends ``nahida.schedule_tick`` every
``NAHIDA_SCHEDULE_TICK_S``; a session worker runs it.  Two beats send two
ticks per period, and that is safe: a tick commits a fire only through a
compare-and-set in the ledger, so each scheduled fire time is dispatched
once (see :mod:`nahida_workers.schedules.scheduler`).
"""

from __future__ import annotations

from typing import Any

from nahida_workers.schedules.scheduler import build_scheduler
from tasks.app import app, fleet
from tasks.celeryconfig import SCHEDULE_TICK

__all__ = ["schedule_tick"]


@app.task(name=SCHEDULE_TICK, ignore_result=True)
def schedule_tick() -> dict[str, Any]:
    """Decide and dispatch every due fire; the result (shown by Flower) lists them."""
    return build_scheduler(fleet()).tick().as_dict()
