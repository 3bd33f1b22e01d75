"""The session task's body: one delivery = one attempt to own and advance a session."""

from __future__ import annotations

import logging
from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import RunError
from nahida_workers.logs import bind_log_context
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.redelivery import delivery_tag, plan_follow_up
from nahida_workers.runtime.wiring import Fleet
from nahida_workers.tools.processes import PROCESSES

__all__ = ["run_session_delivery"]

log = logging.getLogger(__name__)

#: What a delivery returns when its process is stopping and it took nothing.
STOPPING = "stopping"
#: Outcomes after which the session may still need a taker: a follow-up is left.
_FOLLOWED = (
    SessionOutcome.LEASE_HELD,
    SessionOutcome.LEASE_LOST,
    SessionOutcome.OWNER_MAY_BE_ALIVE,
)


def run_session_delivery(
    task: Any, current: Fleet, session_id: str, *, seen_owner: str | None = None, hop: int = 0
) -> str:
    """Take the lease, recover, run the loop, seal, release (DESIGN.md section 1).

    A delivery that finds the session done exits at once, without a ledger
    write (case B01).  One that finds the lease held (or lost it mid-run)
    also writes nothing, but it is never the last delivery: it leaves a
    follow-up for when the lease it saw would expire, carrying the owner
    token it saw (``runtime/ownership/redelivery.py``), so a dead owner -- a SIGKILLed
    prefork child whose message was requeued at once -- is always followed
    by a taker, with or without beat.  A retryable infrastructure failure
    re-publishes the task with a backoff; the ledger already holds every fact
    committed before it.

    A worker that is shutting down (``shutdown.py``) does not start a
    delivery, and an owner it stopped at a boundary (``handed_over``) has
    released the lease: either way the session is delivered again for the
    next worker (:func:`_redeliver`).

    Args:
        task: the bound Celery task (its request id, retries, ``retry``, ``apply_async``).
        current: this process's fleet.
        session_id: the session.
        seen_owner / hop: set on a follow-up: the lease owner its sender saw,
            and its place in the chain.
    """
    bind_log_context(session_id=session_id, run_id=None, trace_id=None)
    if PROCESSES.stopping:
        # This process is being interrupted (Ctrl-C or --timeout of an embedded
        # batch, cli/interrupt.py): taking the session now would run it with
        # its tools refused.  It stays as it is in the ledger; --resume runs it.
        log.info("session %s: not taken, this process is stopping", session_id)
        return STOPPING
    if current.runner.draining():
        # Taken just before this worker stopped consuming: not started, back to the queue.
        return _redeliver(task, session_id, "not started: this worker is shutting down",
                        seen_owner=seen_owner, hop=hop)  # fmt: skip
    tag = delivery_tag(str(task.request.id or ""))
    try:
        # Only a follow-up has seen the last owner's lease lapse (or waited for it).
        outcome = current.runner.run(session_id, delivery_tag=tag, grace=seen_owner is None)
    except RunError as exc:
        if not exc.retryable:
            raise
        countdown = exc.retry_after or min(60, 2 ** min(task.request.retries, 6))
        log.warning(
            "session %s: retryable failure (%s); retrying in %ss", session_id, exc, countdown
        )
        raise task.retry(exc=exc, countdown=countdown) from exc
    if outcome is SessionOutcome.HANDED_OVER:
        return _redeliver(
            task, session_id, "handed over at a boundary; the worker is shutting down"
        )
    if outcome in _FOLLOWED:
        _follow_up(task, current, session_id, outcome, tag=tag, seen_owner=seen_owner, hop=hop)
    elif outcome is SessionOutcome.PARKED:
        _woken_while_parking(task, current, session_id)
    return outcome.value


def _redeliver(
    task: Any, session_id: str, why: str, *, seen_owner: str | None = None, hop: int = 0
) -> str:
    """Publish the session's delivery again for the next worker (DESIGN.md section 8).

    The lease is already released (or was never taken), so whichever worker
    takes the message continues at once.  This worker no longer consumes: a
    warm shutdown stopped its consumer.  A publish that fails leaves the
    session to the sweeper (a running session with no owner).

    Returns:
        ``handed_over``: what this delivery did.
    """
    task.apply_async(args=[session_id], kwargs={"seen_owner": seen_owner, "hop": hop})
    log.info("session %s: %s; delivered again for the next worker", session_id, why)
    return SessionOutcome.HANDED_OVER.value


def _woken_while_parking(task: Any, current: Fleet, session_id: str) -> None:
    """Deliver at once a session its last child woke while it still held the lease.

    A wake that lands between the park commit and the lease release finds
    the lease held and would follow up only when that lease could expire
    (a whole TTL).  The lease is released now: if the session is no longer
    ``waiting``, it was woken meanwhile -- publish a delivery now.  A
    duplicate of the wake's own delivery is harmless (case B01).
    """
    session = current.ledger.get_session(session_id)
    if session is not None and session.status is SessionStatus.QUEUED:
        task.apply_async(args=[session_id])
        log.info("session %s: woken while it parked; delivered again at once", session_id)


def _follow_up(
    task: Any,
    current: Fleet,
    session_id: str,
    outcome: SessionOutcome,
    *,
    tag: str,
    seen_owner: str | None,
    hop: int,
) -> None:
    """Leave a follow-up delivery for when the lease this one saw would expire."""
    conf = current.settings
    plan = plan_follow_up(
        outcome,
        holder=current.leases.holder(session_id),
        ttl_ms=current.leases.ttl_ms(session_id),
        seen_owner=seen_owner,
        hop=hop,
        tag=tag,
        lease_ttl_s=conf.lease_ttl_s,
        visibility_timeout_s=conf.visibility_timeout_s,
        max_hops=conf.follow_up_max_hops,
    )
    if plan is None:
        log.info("session %s: %s; no follow-up needed", session_id, outcome.value)
    else:
        task.apply_async(
            args=[session_id],
            kwargs={"seen_owner": plan.seen_owner, "hop": plan.hop},
            countdown=plan.countdown_s,
        )
        log.info(
            "session %s: %s (owner %s); follow-up delivery %d in %.1fs",
            session_id,
            outcome.value,
            plan.seen_owner,
            plan.hop,
            plan.countdown_s,
        )
