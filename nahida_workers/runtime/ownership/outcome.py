"""How one ``run_session`` delivery ended (DESIGN.md section 4).

The owner returns it; the Celery task decides from it whether the broker must
deliver the session again (:mod:`~nahida_workers.runtime.ownership.redelivery`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HandedOver", "SessionOutcome"]


class SessionOutcome(StrEnum):
    """What one ``run_session`` delivery did."""

    FINISHED = "finished"  # this delivery committed the terminal state
    LEASE_HELD = "lease_held"  # another live owner holds the lease: no-op
    ALREADY_DONE = "already_done"  # nothing left to run: no-op
    NOT_FOUND = "not_found"  # unknown session id: no-op
    LEASE_LOST = "lease_lost"  # lost the lease mid-run; the next owner continues
    PARKED = "parked"  # waits for child sessions; their completions re-dispatch it
    DEFERRED = "deferred"  # its group is at its cap: a freed slot re-publishes it
    HANDED_OVER = "handed_over"  # the worker shuts down: stopped at a boundary, lease released
    # The lease was free, but the last owner never handed the session back: it may
    # be alive and about to re-take its lease (a restarted lease store): look again later.
    OWNER_MAY_BE_ALIVE = "owner_may_be_alive"


class HandedOver(Exception):
    """Raised by the owner that stopped at a boundary because its worker shuts down.

    DESIGN.md section 8 (shutdown): the run's ``handover`` event is committed;
    the delivery releases the lease and its message goes back to the queue.
    """
