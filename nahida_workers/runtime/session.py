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

The owner's part lives in :mod:`~nahida_workers.runtime.owner`, the effect
interpreter in :mod:`~nahida_workers.runtime.driver`, and every commit point
in :mod:`~nahida_workers.runtime.commits`.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nahida_workers.constants import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEDGER_OUTAGE_S,
    DEFAULT_LEDGER_SEAL_OUTAGE_S,
    DEFAULT_POISON_AFTER_CRASHES,
)
from nahida_workers.core.events import (
    FailureCode,
    ReasonCode,
    SessionStatus,
)
from nahida_workers.core.lineage import ChildLimits
from nahida_workers.core.records import InboxLimits, OutboxRecord
from nahida_workers.errors import (
    LeaseLostError,
    StaleEpochError,
)
from nahida_workers.plugins import StopHooks
from nahida_workers.ports import Clock, Fence, LeaseStore, Ledger, Provider
from nahida_workers.runtime.channel import EventSink, NullSink
from nahida_workers.runtime.commits import hand_back, take_over
from nahida_workers.runtime.executor import ToolExecutor
from nahida_workers.runtime.heartbeat import Heartbeat
from nahida_workers.runtime.owner import SessionOutcome, SessionOwner
from nahida_workers.runtime.redelivery import is_poison
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.workspaces import WorktreeManager

__all__ = ["SessionOutcome", "SessionRunner", "owner_token"]

log = logging.getLogger(__name__)


def owner_token(delivery_tag: str = "") -> str:
    """A lease owner token unique to this process and call: ``host:pid:uuid[:tag]``.

    ``delivery_tag`` names the broker message the owner runs in
    (``runtime/redelivery.py``: a requeued copy of that message recognises
    the lease its dead owner left).
    """
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    return f"{token}:{delivery_tag}" if delivery_tag else token


@dataclass
class SessionRunner:
    """Everything one session delivery needs, as ports.

    Attributes:
        ledger / leases / clock: the ports.
        provider_for: builds the provider of a session spec.
        registry_for: builds the tool registry of a session spec.
        executor: runs tool batches.
        lease_ttl_ms: lease TTL in milliseconds (heartbeat at a third of it).
        ledger_outage_s: how long a commit point is retried through a ledger
            outage, in seconds (``runtime/outage.py``); 0 = one attempt.
        ledger_seal_outage_s: how long the seal ``failed/tool_persistence_failed``
            is retried after tool results could not be stored, in seconds
            (DESIGN.md section 3 step 5; the owner keeps its lease meanwhile).
        prestart: start read-only concurrency-safe calls while the provider
            still streams (needs a fan-out executor; see ``runtime/prestart.py``).
        sink: where user-visible events go (``runtime/channel.py``).
        child_limits: bounds on child sessions (settings; DESIGN.md section 8).
        publish: publishes an outbox row a commit point wrote (child sessions,
            a woken parent) after its commit; None leaves them to the sweeper.
        poison_after_crashes: a session whose last this-many owners all
            crashed without progress is sealed ``failed/poison_session``
            instead of being run again (``runtime/redelivery.py``;
            ``bump_epoch`` counts them in the ledger).
        inbox_limits: the inbox bounds a background child's completion is
            posted under (DESIGN.md section 8).
        worktrees: makes the git worktrees of ``isolation: worktree``
            children (None: such Task calls are refused).
        stop_hooks: the stop hooks the operator registered; a job's other
            names are never imported (``nahida_workers/plugins.py``).
    """

    ledger: Ledger[Any]
    leases: LeaseStore
    clock: Clock
    provider_for: Callable[[SessionSpec], Provider]
    registry_for: Callable[[SessionSpec], ToolRegistry]
    executor: ToolExecutor
    lease_ttl_ms: int = int(DEFAULT_LEASE_TTL_S * 1000)
    ledger_outage_s: float = DEFAULT_LEDGER_OUTAGE_S
    ledger_seal_outage_s: float = DEFAULT_LEDGER_SEAL_OUTAGE_S
    prestart: bool = True
    sink: EventSink = field(default_factory=NullSink)
    poison_after_crashes: int = DEFAULT_POISON_AFTER_CRASHES
    child_limits: ChildLimits = field(default_factory=ChildLimits)
    publish: Callable[[OutboxRecord], None] | None = None
    inbox_limits: InboxLimits = field(default_factory=InboxLimits)
    worktrees: WorktreeManager | None = None
    stop_hooks: StopHooks = field(default_factory=StopHooks)

    def settle(self, session_id: str) -> bool:
        """End a session stuck with no owner: its open run sealed ``failed/abandoned``.

        Takes the lease and bumps the epoch like any owner (a worker that
        comes back later is fenced out), closes orphan calls as interrupted,
        and seals.  Returns False when someone holds the lease (not stuck).
        """
        owner = owner_token()
        if not self.leases.acquire(session_id, owner, self.lease_ttl_ms):
            return False
        try:
            with self._heartbeat(session_id, owner) as heartbeat:
                session = self.ledger.get_session(session_id)
                if session is None or session.status is SessionStatus.DONE:
                    return False
                epoch = take_over(self.ledger, session_id, at=self.clock.now())
                SessionOwner(self, session, Fence(session_id, epoch), heartbeat).abandon()
                self._close(session_id, epoch)
                return True
        finally:
            self.leases.release(session_id, owner)

    def run(self, session_id: str, *, delivery_tag: str = "") -> SessionOutcome:
        """Run the session's open run to a terminal state, if nobody else is.

        A delivery that finds the session done or the lease held returns
        without writing anything (case B01).  ``delivery_tag`` (see
        :func:`owner_token`) is put in the lease's owner token.

        Raises:
            LedgerError / ProviderError: infrastructure failures the caller may
                retry; the ledger holds every fact committed before them.
        """
        session = self.ledger.get_session(session_id)
        if session is None:
            return SessionOutcome.NOT_FOUND
        if session.status is SessionStatus.DONE:
            return SessionOutcome.ALREADY_DONE
        owner = owner_token(delivery_tag)
        if not self.leases.acquire(session_id, owner, self.lease_ttl_ms):
            log.info("session %s: lease held by another owner; delivery exits", session_id)
            return SessionOutcome.LEASE_HELD
        epoch: int | None = None
        try:
            with self._heartbeat(session_id, owner) as heartbeat:
                epoch = take_over(self.ledger, session_id, at=self.clock.now())
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
            log.warning("session %s: lease_lost (%s); stopping without writing", session_id, exc)
            return SessionOutcome.LEASE_LOST
        finally:
            if epoch is not None:
                self._close(session_id, epoch)
            if not self.leases.release(session_id, owner):
                log.warning("session %s: lease_lost before release (not owned)", session_id)

    def _heartbeat(self, session_id: str, owner: str) -> Heartbeat:
        return Heartbeat(self.leases, session_id, owner, self.lease_ttl_ms, clock=self.clock)

    def _close(self, session_id: str, epoch: int) -> None:
        """Hand the session back cleanly: this owner did not crash (``close_owner``)."""
        hand_back(self.ledger, session_id, epoch, at=self.clock.now())
