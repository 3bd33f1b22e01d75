"""How one ``run_session`` delivery ended (DESIGN.md section 4).

The owner returns it; the Celery task decides from it whether the broker must
deliver the session again (:mod:`~nahida_workers.runtime.ownership.redelivery`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SessionOutcome"]


class SessionOutcome(StrEnum):
    """What one ``run_session`` delivery did."""

    FINISHED = "finished"  # this delivery committed the terminal state
    LEASE_HELD = "lease_held"  # another live owner holds the lease: no-op
    ALREADY_DONE = "already_done"  # nothing left to run: no-op
    NOT_FOUND = "not_found"  # unknown session id: no-op
    LEASE_LOST = "lease_lost"  # lost the lease mid-run; the next owner continues
    PARKED = "parked"  # waits for child sessions; their completions re-dispatch it
    DEFERRED = "deferred"  # its group is at its cap: a freed slot re-publishes it
