"""Owner changes on record: a lease re-taken, a lease lost, a session handed over.

DESIGN.md section 4 (lease and fencing) and section 8 (shutdown).  Three
``control`` event kinds put what happened to a run's owner in its ledger:

* ``lease`` with ``event: retaken`` -- the lease store came back without the
  lease (a Redis restart) and the live owner took it again with its own token,
  its fencing epoch still current: it carried on, nothing was interrupted;
* ``lease`` with ``event: lost`` -- the owner stopped because the loss was real
  (:class:`LeaseLoss` names which); written only while its epoch is still the
  session's, so it lands only when no later owner has taken over yet;
* ``handover`` -- the owner's worker was shutting down: it stopped at a
  boundary, and names the calls of the turn it committed but never started.

The calls a handover names are the only orphan calls a next owner may start
as if they were new (``core/recovery.py``): the handing owner certified they
never ran -- provided no owner came between (its epoch is the one just
before the recovering owner's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.state import RunState

__all__ = [
    "HANDOVER_KIND",
    "LEASE_KIND",
    "HandoverReason",
    "LeaseLoss",
    "handover_event",
    "lease_event",
    "lost_lease_reason",
    "unstarted_calls",
]

#: ``control`` kind of a lease fact (``event`` is ``retaken`` or ``lost``).
LEASE_KIND = "lease"
#: ``control`` kind of an owner that stopped at a boundary and handed the session on.
HANDOVER_KIND = "handover"


class LeaseLoss(StrEnum):
    """Why an owner counts its lease as lost (the ``reason`` of a ``lost`` event)."""

    #: Another owner token holds the lease key.
    ANOTHER_OWNER = "another_owner"
    #: The key was free, but the session's fencing epoch had moved past this owner's.
    EPOCH_BUMPED = "epoch_bumped"
    #: Neither a renewal nor a re-take got through for a whole TTL (store or ledger
    #: unreachable): the key may have expired and been taken meanwhile.
    UNREACHABLE = "lease_unreachable"
    #: No successful renewal for a whole TTL seen by the owner itself (a paused process).
    RENEWAL_GAP = "renewal_gap"


class HandoverReason(StrEnum):
    """Why an owner handed its session on (the ``reason`` of a ``handover`` event)."""

    #: The worker process received SIGTERM (a deploy, a scale-down).
    WORKER_SHUTDOWN = "worker_shutdown"


def lease_event(state: RunState, what: str, reason: str, *, epoch: int, now: datetime) -> Event:
    """A ``lease`` control event: ``what`` is ``retaken`` or ``lost``, ``reason`` says why."""
    return Event(
        run_id=state.run_id,
        sequence=state.next_sequence,
        type=EventType.CONTROL,
        payload={"kind": LEASE_KIND, "event": what, "reason": reason, "epoch": epoch},
        created_at=now,
    )


def handover_event(state: RunState, reason: HandoverReason, *, epoch: int, now: datetime) -> Event:
    """The ``handover`` control event: every call still without a result never started.

    The handing owner writes it at a boundary -- after the results of its last
    batch committed and before any further call started -- so the calls still
    pending are exactly the ones it committed and did not run.
    """
    return Event(
        run_id=state.run_id,
        sequence=state.next_sequence,
        type=EventType.CONTROL,
        payload={
            "kind": HANDOVER_KIND,
            "reason": reason.value,
            "epoch": epoch,
            "unstarted": [c.call_id for c in state.pending_calls()],
        },
        created_at=now,
    )


def unstarted_calls(events: Sequence[Event], epoch: int) -> frozenset[str]:
    """Call ids a new owner at ``epoch`` may start as never run (see module doc).

    The latest ``handover`` event counts only when its owner's epoch is
    ``epoch - 1``: an owner in between may have started those calls.
    """
    for event in reversed(events):
        if event.type is EventType.CONTROL and event.payload.get("kind") == HANDOVER_KIND:
            if int(event.payload.get("epoch", -1)) != epoch - 1:
                return frozenset()
            return frozenset(str(c) for c in event.payload.get("unstarted", ()))
    return frozenset()


def lost_lease_reason(events: Sequence[Event], after_sequence: int) -> str | None:
    """The reason of the latest ``lease``/``lost`` event after ``after_sequence``, if any."""
    for event in reversed(events):
        if event.sequence <= after_sequence:
            return None
        payload = event.payload
        if (
            event.type is EventType.CONTROL
            and payload.get("kind") == LEASE_KIND
            and payload.get("event") == "lost"
        ):
            return str(payload.get("reason", ""))
    return None
