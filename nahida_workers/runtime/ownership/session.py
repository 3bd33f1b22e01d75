"""Running one session: lease → epoch → recover → loop → terminal → release.

DESIGN.md sections 3 and 4.  A delivery takes the lease and bumps the
epoch here; its owner drives the pure loop (:mod:`nahida_workers.core.loop`)
over the ports through the commit points:

1. step 3 -- ``assistant_output`` and every ``tool_call`` of a provider turn in
   one transaction; if it fails, no tool starts;
2. step 5 -- every ``tool_result`` of a batch with its receipt in one
   transaction, in provider order, before anything else sees them; if that
   fails the run stops ``failed/tool_persistence_failed``;
3. the terminal event, the run row and the session status in one transaction.

A worker that shuts down (``draining``) stops each owned run at its next
boundary with a ``handover`` event (DESIGN.md section 8, shutdown); the
delivery then ends :attr:`~SessionOutcome.HANDED_OVER` with the lease released,
and its message goes back to the queue for the next worker.

The owner's part lives in :mod:`~nahida_workers.runtime.ownership.owner`, the effect
interpreter in :mod:`~nahida_workers.runtime.ownership.driver`, and every commit point
in :mod:`~nahida_workers.runtime.commits.points`.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from nahida_workers.core.events import (
    FailureCode,
    ReasonCode,
    SessionStatus,
)
from nahida_workers.core.records import SessionRecord
from nahida_workers.errors import (
    LeaseLostError,
    StaleEpochError,
)
from nahida_workers.ports import Fence
from nahida_workers.runtime.commits.points import hand_back, take_over
from nahida_workers.runtime.dispatch.admission import admit, free_slot
from nahida_workers.runtime.ownership.delivery import DeliveryPorts
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.runtime.ownership.outcome import HandedOver, SessionOutcome
from nahida_workers.runtime.ownership.owner import SessionOwner
from nahida_workers.runtime.ownership.redelivery import is_poison

__all__ = ["SessionRunner", "owner_token"]

log = logging.getLogger(__name__)


def owner_token(delivery_tag: str = "") -> str:
    """A lease owner token unique to this process and call: ``host:pid:uuid[:tag]``.

    ``delivery_tag`` names the broker message the owner runs in
    (``runtime/ownership/redelivery.py``: a requeued copy of that message recognises
    the lease its dead owner left).
    """
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    return f"{token}:{delivery_tag}" if delivery_tag else token


@dataclass
class SessionRunner(DeliveryPorts):
    """Runs session deliveries over the ports and settings of :class:`DeliveryPorts`.

    Takes the lease, bumps the epoch, hands the session to its owner and
    releases the lease after; the constructor takes the fields of
    :class:`DeliveryPorts`.
    """

    def settle(self, session_id: str) -> bool:
        """End a session stuck with no owner: its open run sealed ``failed/abandoned``.

        Takes the lease and bumps the epoch like any owner (a worker that
        comes back later is fenced out), closes orphan calls as interrupted,
        and seals.  Returns False when someone holds the lease (not stuck).
        """
        owner = owner_token()
        if not self.leases.acquire(session_id, owner, self.lease_ttl_ms):
            return False
        group: str | None = None
        try:
            with self._heartbeat(session_id, owner) as heartbeat:
                session = self.ledger.get_session(session_id)
                if session is None or session.status is SessionStatus.DONE:
                    return False
                group = session.admission_group
                epoch = take_over(self.ledger, session_id, at=self.clock.now())
                heartbeat.watch_epoch(self._epoch_is(session_id, epoch))
                SessionOwner(self, session, Fence(session_id, epoch), heartbeat).abandon()
                self._close(session_id, epoch)
                return True
        finally:
            self.leases.release(session_id, owner)
            if group is not None:
                free_slot(self.ledger, group, at=self.clock.now(), publish=self.publish)

    def run(
        self, session_id: str, *, delivery_tag: str = "", grace: bool = False
    ) -> SessionOutcome:
        """Run the session's open run to a terminal state, if nobody else is.

        A delivery that finds the session done or the lease held returns
        without writing anything (case B01).  ``delivery_tag`` (see
        :func:`owner_token`) is put in the lease's owner token.

        ``grace``: a free lease is not proof that the owner is gone.  After a
        lease-store restart a live owner's key is missing until its next
        renewal re-takes it (``heartbeat.py``); taking the session in that
        window would stop the owner mid-tool.  With ``grace``, a running
        session whose last owner never handed it back is not taken: the
        delivery returns :attr:`SessionOutcome.OWNER_MAY_BE_ALIVE` and its
        caller looks again one renewal interval later
        (``runtime/ownership/redelivery.py``).  A caller that has seen that
        owner's lease lapse passes False.

        Raises:
            LedgerError / ProviderError: infrastructure failures the caller may
                retry; the ledger holds every fact committed before them.
        """
        session = self.ledger.get_session(session_id)
        if session is None:
            return SessionOutcome.NOT_FOUND
        if session.status is SessionStatus.DONE:
            return SessionOutcome.ALREADY_DONE
        if grace and self._owner_may_be_alive(session):
            log.info(
                "session %s: lease free but its owner (epoch %s) never handed it back; "
                "looking again after a renewal interval",
                session_id,
                session.open_epoch,
            )
            return SessionOutcome.OWNER_MAY_BE_ALIVE
        owner = owner_token(delivery_tag)
        if not self.leases.acquire(session_id, owner, self.lease_ttl_ms):
            log.info("session %s: lease held by another owner; delivery exits", session_id)
            return SessionOutcome.LEASE_HELD
        epoch: int | None = None
        try:
            if not admit(self.ledger, session, at=self.clock.now()):
                log.info(
                    "session %s: group %s is at its cap; deferred until a slot frees",
                    session_id,
                    session.admission_group,
                )
                return SessionOutcome.DEFERRED
            with self._heartbeat(session_id, owner) as heartbeat:
                epoch = take_over(self.ledger, session_id, at=self.clock.now())
                heartbeat.watch_epoch(self._epoch_is(session_id, epoch))
                session = self.ledger.get_session(session_id) or session  # the crash count
                owned = SessionOwner(self, session, Fence(session_id, epoch), heartbeat)
                if is_poison(session.crash_streak, self.poison_after_crashes):
                    log.error(
                        "session %s: its last %d owners crashed without progress; sealing the "
                        "open run failed/poison_session",
                        session_id,
                        session.crash_streak,
                    )
                    owned.abandon(ReasonCode.POISON_SESSION, FailureCode.POISON_SESSION)
                    owned.run()  # input that waits for a next run still starts it
                    return SessionOutcome.FINISHED
                return owned.run()
        except (LeaseLostError, StaleEpochError) as exc:
            log.warning("session %s: lease_lost (%s); stopping", session_id, exc)
            return SessionOutcome.LEASE_LOST
        except HandedOver:
            log.info("session %s: handed over at a boundary; the worker shuts down", session_id)
            return SessionOutcome.HANDED_OVER
        finally:
            if epoch is not None:
                self._close(session_id, epoch)
            self._release(session_id, owner)
            if epoch is not None and session.admission_group is not None:
                # This delivery's slot in the group is free (sealed, parked or
                # lost): deferred sessions of the group may start.
                free_slot(
                    self.ledger, session.admission_group, at=self.clock.now(), publish=self.publish
                )

    def _release(self, session_id: str, owner: str) -> None:
        """Release the lease; a store that cannot be reached is logged, never raised.

        The ledger already holds the hand-back (or the seal, or the park), so an
        unreachable lease store (a Redis restart during a handover) must not turn
        this delivery's outcome into an exception: the key, if it still exists,
        expires within the lease TTL, and the next owner takes it then
        (DESIGN.md section 4).  Found by the mixed chaos run (bench/chaos_mixed.py).
        """
        try:
            released = self.leases.release(session_id, owner)
        except Exception as exc:  # the store is a port: any of its transport errors
            log.warning(
                "session %s: lease store unreachable at release (%s); the lease expires "
                "within its TTL (%d ms)",
                session_id,
                exc,
                self.lease_ttl_ms,
            )
            return
        if not released:
            log.warning("session %s: lease_lost before release (not owned)", session_id)

    def _owner_may_be_alive(self, session: SessionRecord) -> bool:
        """Running, lease free, and its owner took it without handing it back (see :meth:`run`)."""
        return (
            session.status is SessionStatus.RUNNING
            and session.open_epoch is not None
            and self.leases.holder(session.session_id) is None
        )

    def _epoch_is(self, session_id: str, epoch: int) -> Callable[[], bool]:
        """Whether ``epoch`` is still the session's (the heartbeat's re-take check, section 4)."""

        def current() -> bool:
            session = self.ledger.get_session(session_id)
            return session is not None and session.lease_epoch == epoch

        return current

    def _heartbeat(self, session_id: str, owner: str) -> Heartbeat:
        return Heartbeat(self.leases, session_id, owner, self.lease_ttl_ms, clock=self.clock)

    def _close(self, session_id: str, epoch: int) -> None:
        """Hand the session back cleanly: this owner did not crash (``close_owner``)."""
        hand_back(self.ledger, session_id, epoch, at=self.clock.now())
