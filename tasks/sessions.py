"""``nahida.run_session``: one delivery = one attempt to own and advance a session.

Defined by :func:`nahida_workers.celery.tasks.define_tasks`; the body is
:func:`nahida_workers.celery.sessions.run_session_delivery`.
"""

from tasks import app

run_session = app.nahida.tasks.run_session

__all__ = ["run_session"]
