"""``nahida.schedule_tick``: beat's tick for user schedules (DESIGN.md section 8).

Two beats send two ticks per period, and that is safe: a tick commits a fire
only through a compare-and-set in the ledger, so each scheduled fire time is
dispatched once (:mod:`nahida_workers.schedules.scheduler`).
"""

from tasks import app

schedule_tick = app.nahida.tasks.schedule_tick

__all__ = ["schedule_tick"]
