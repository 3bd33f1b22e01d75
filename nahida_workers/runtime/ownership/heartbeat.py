"""Lease heartbeat: renew at ttl/3 while the loop runs (DESIGN.md section 4).

A daemon thread renews the lease with the compare-and-set script.  A renewal
refused because the key is *gone* is not a lost lease: the lease store may
have restarted empty (a Redis restart without persistence).  The owner then
re-takes the key with its own token (``SET NX``, :meth:`Heartbeat._retake`)
and carries on, provided its fencing epoch is still the session's in the
ledger -- the epoch is the authority, the key only the mutual exclusion, so
this is safe: while the owner holds the key again nobody else can take it,
and an owner that took it meanwhile would have bumped the epoch.  A re-take
is noted (:meth:`Heartbeat.take_notes`) and put on the run's record at its
next boundary.

Only a real loss stops the owner (:class:`~nahida_workers.core.handover.LeaseLoss`):
another token holds the key, the epoch moved on, or no renewal or re-take
got through for a whole TTL (the store unreachable, or this process paused):
after that the key may have expired on the server and been taken, so the
owner must not start or keep running a side effect.  While the store is
unreachable the thread retries every :data:`LEASE_OUTAGE_RETRY_S` so it
re-takes the key as soon as the store is back.  The loop checks
:meth:`Heartbeat.check` at every boundary; the fencing epoch in the ledger
stops any write that slips through regardless.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from nahida_workers.constants import LEASE_OUTAGE_RETRY_S
from nahida_workers.core.handover import LeaseLoss
from nahida_workers.errors import LeaseLostError
from nahida_workers.ports import Clock, LeaseStore, SystemClock

__all__ = ["Heartbeat", "LeaseNote"]

log = logging.getLogger(__name__)

#: ``LeaseNote.reason`` of a re-take: the store no longer had the key.
RETAKEN_EMPTY = "lease_store_empty"


@dataclass(frozen=True)
class LeaseNote:
    """Something that happened to the lease that the run's record should say.

    Attributes:
        event: ``retaken`` (the only note so far).
        reason: why (``lease_store_empty``).
    """

    event: str
    reason: str


class Heartbeat:
    """Renews one session lease in the background.

    Args:
        leases: the lease store.
        session_id / owner: the lease held.
        ttl_ms: TTL to renew to, in milliseconds; renewals every ttl/3.
        clock: the Clock port whose monotonic seconds decide "a whole TTL
            without a successful renewal" (the renewal thread's cadence is
            real time: it talks to a real store).
    """

    def __init__(
        self,
        leases: LeaseStore,
        session_id: str,
        owner: str,
        ttl_ms: int,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._leases = leases
        self._session_id = session_id
        self._owner = owner
        self._ttl_ms = ttl_ms
        self._interval_s = ttl_ms / 3000.0
        self._retry_s = min(self._interval_s, LEASE_OUTAGE_RETRY_S)
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._loss: LeaseLoss | None = None
        self._renewing = threading.Lock()
        self._losing = threading.Lock()
        self._noting = threading.Lock()  # not _renewing: a renewal may wait on a slow store
        self._notes: list[LeaseNote] = []
        self._epoch_current: Callable[[], bool] | None = None
        self._last_ok = self._clock.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-heartbeat-{session_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def lost(self) -> bool:
        """True once the lease is known or presumed lost."""
        return self._lost.is_set()

    @property
    def loss(self) -> LeaseLoss | None:
        """Why the lease counts as lost (None while it is held)."""
        return self._loss

    def watch_epoch(self, current: Callable[[], bool]) -> None:
        """From now on a re-take needs ``current()``: this owner's epoch is still the session's.

        Set once the owner bumped the epoch (before that a re-take needs no
        check: the bump that follows fences out whoever held the session).
        ``current`` reads the ledger and may raise when it is unreachable.
        """
        self._epoch_current = current

    def take_notes(self) -> list[LeaseNote]:
        """The notes gathered since the last call (re-takes), oldest first."""
        with self._noting:
            notes, self._notes = self._notes, []
        return notes

    def check(self) -> None:
        """Raise if the lease is lost, or if no renewal succeeded for a whole TTL.

        The second test catches a process that was paused (SIGSTOP, a VM
        freeze) before its heartbeat thread had a chance to notice: after
        ``SIGCONT`` the monotonic clock shows the gap at once.

        Raises:
            LeaseLostError: this owner must stop without writing; its
                ``reason`` is the :class:`LeaseLoss` value.
        """
        if not self._lost.is_set() and self._gap_ms() >= self._ttl_ms:
            self._mark_lost(LeaseLoss.RENEWAL_GAP, "no successful renewal for a whole ttl")
        if self._lost.is_set():
            reason = self._loss.value if self._loss is not None else ""
            raise LeaseLostError(
                f"lease on session {self._session_id} lost ({reason})", reason=reason
            )

    def confirm(self) -> None:
        """Renew now, synchronously: called before a side effect starts (an exclusive tool).

        A store that does not answer is retried every
        :data:`LEASE_OUTAGE_RETRY_S` while less than a TTL has passed since the
        last successful renewal (a Redis restart takes well under a TTL).

        Raises:
            LeaseLostError: the lease is gone or could not be confirmed within
                the TTL; the side effect must not start.
        """
        self.check()
        attempts = max(1, math.ceil(self._ttl_ms / 1000 / self._retry_s) + 1)
        for _ in range(attempts):
            try:
                self._renew()
            except Exception as exc:
                log.warning("lease confirmation for %s failed: %s", self._session_id, exc)
                if self._gap_ms() >= self._ttl_ms:
                    self._mark_lost(LeaseLoss.UNREACHABLE, f"unconfirmed for a whole ttl: {exc}")
                    break
                self._stop.wait(self._retry_s)
                continue
            break
        else:
            self._mark_lost(LeaseLoss.UNREACHABLE, "unconfirmed for a whole ttl")
        self.check()

    def stop(self) -> None:
        """Stop renewing (the caller releases the lease)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._interval_s + 1)

    # -- the renewal ----------------------------------------------------------------------
    def _run(self) -> None:
        wait_s = self._interval_s
        while not self._stop.wait(wait_s):
            try:
                self._renew()
            except Exception as exc:  # the store (or the ledger) is unreachable: keep trying
                log.warning("lease renewal for %s failed: %s", self._session_id, exc)
                if self._gap_ms() >= self._ttl_ms:
                    self._mark_lost(LeaseLoss.UNREACHABLE, "no renewal got through for a whole ttl")
                    return
                wait_s = self._retry_s  # re-take as soon as the store is back
                continue
            if self._lost.is_set():
                return
            wait_s = self._interval_s

    def _renew(self) -> None:
        """Renew; when the key is gone, re-take it (see module doc).  Marks a real loss.

        Raises:
            Exception: whatever the store or the epoch check raised (unreachable).
        """
        with self._renewing:
            if self._lost.is_set():
                return
            if self._leases.renew(self._session_id, self._owner, self._ttl_ms):
                self._last_ok = self._clock.monotonic()
                return
            self._retake()

    def _retake(self) -> None:
        """The renewal was refused: take the key again with our token if it is free and ours."""
        if not self._epoch_is_ours():
            self._mark_lost(LeaseLoss.EPOCH_BUMPED, "the session's epoch moved past this owner's")
            return
        if self._leases.acquire(self._session_id, self._owner, self._ttl_ms):
            if not self._epoch_is_ours():  # bumped between the check and the SET: give it back
                self._leases.release(self._session_id, self._owner)
                self._mark_lost(LeaseLoss.EPOCH_BUMPED, "the epoch moved while re-taking")
                return
            log.warning(
                "lease_retaken session=%s owner=%s: the lease store had lost the key; "
                "this owner's epoch is still current, carrying on",
                self._session_id,
                self._owner,
            )
            with self._noting:
                self._notes.append(LeaseNote("retaken", RETAKEN_EMPTY))
            self._last_ok = self._clock.monotonic()
            return
        holder = self._leases.holder(self._session_id)
        if holder == self._owner:  # renewed or re-taken by a concurrent call
            self._last_ok = self._clock.monotonic()
        elif holder is not None:
            self._mark_lost(LeaseLoss.ANOTHER_OWNER, "another owner holds the lease")
        # holder None: freed between the SET and the read; the next attempt re-takes it

    def _epoch_is_ours(self) -> bool:
        return self._epoch_current is None or self._epoch_current()

    def _gap_ms(self) -> float:
        return (self._clock.monotonic() - self._last_ok) * 1000

    def _mark_lost(self, loss: LeaseLoss, why: str) -> None:
        with self._losing:
            if self._lost.is_set():
                return
            self._loss = loss
            self._lost.set()
        log.warning(
            "lease_lost session=%s owner=%s reason=%s: %s",
            self._session_id,
            self._owner,
            loss.value,
            why,
        )
