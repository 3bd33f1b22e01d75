"""``nahida.sweep``: beat's sweeper (outbox, ownerless and stuck sessions).

Defined by :func:`nahida_workers.celery.tasks.define_tasks`; the body is
:func:`nahida_workers.celery.maintenance.sweep`.
"""

from tasks import app

sweep = app.nahida.tasks.sweep

__all__ = ["sweep"]
