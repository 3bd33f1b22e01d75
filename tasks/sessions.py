"""The session task: one delivery = one attempt to own and advance a session."""

from __future__ import annotations

import logging
from typing import Any

from nahida_workers.errors import RunError
from nahida_workers.logs import bind_log_context
from tasks.app import app, fleet
from tasks.celeryconfig import RUN_SESSION

__all__ = ["run_session"]

log = logging.getLogger(__name__)


@app.task(
    name=RUN_SESSION,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    max_retries=None,
)
def run_session(self: Any, session_id: str) -> str:
    """Take the lease, recover, run the loop, seal, release (DESIGN.md section 1).

    A delivery that finds the lease held or the session done exits at once,
    without a ledger write, and is acked (case B01).  A retryable
    infrastructure failure re-publishes the task with a backoff; the ledger
    already holds every fact committed before it.
    """
    bind_log_context(session_id=session_id, run_id=None, trace_id=None)
    try:
        outcome = fleet().runner.run(session_id)
    except RunError as exc:
        if not exc.retryable:
            raise
        countdown = exc.retry_after or min(60, 2 ** min(self.request.retries, 6))
        log.warning(
            "session %s: retryable failure (%s); retrying in %ss", session_id, exc, countdown
        )
        raise self.retry(exc=exc, countdown=countdown) from exc
    return outcome.value
