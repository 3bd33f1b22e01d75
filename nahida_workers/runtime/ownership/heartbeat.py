"""Lease heartbeat: renew at ttl/3 while the loop runs (DESIGN.md section 4).

A daemon thread renews the lease with the compare-and-set script.  The lease
counts as lost when a renewal says "not yours", or when no renewal has
succeeded for a whole TTL (Redis unreachable: the key may have expired on the
server).  The loop checks :meth:`Heartbeat.check` at every boundary; the
fencing epoch in the ledger stops any write that slips through regardless.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from nahida_workers.errors import LeaseLostError
from nahida_workers.ports import Clock, LeaseStore, SystemClock

__all__ = ["Heartbeat"]

log = logging.getLogger(__name__)


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
        self._stop = threading.Event()
        self._lost = threading.Event()
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

    def check(self) -> None:
        """Raise if the lease is lost, or if no renewal succeeded for a whole TTL.

        The second test catches a process that was paused (SIGSTOP, a VM
        freeze) before its heartbeat thread had a chance to notice: after
        ``SIGCONT`` the monotonic clock shows the gap at once.

        Raises:
            LeaseLostError: this owner must stop without writing.
        """
        if (
            not self._lost.is_set()
            and (self._clock.monotonic() - self._last_ok) * 1000 >= self._ttl_ms
        ):
            self._mark_lost("no successful renewal for a whole ttl")
        if self._lost.is_set():
            raise LeaseLostError(f"lease on session {self._session_id} lost")

    def confirm(self) -> None:
        """Renew now, synchronously: called before a side effect starts (an exclusive tool).

        Raises:
            LeaseLostError: the lease is gone; the side effect must not start.
        """
        self.check()
        try:
            ok = self._leases.renew(self._session_id, self._owner, self._ttl_ms)
        except Exception as exc:
            raise LeaseLostError(f"lease on session {self._session_id} unconfirmed: {exc}") from exc
        if not ok:
            self._mark_lost("renewal refused before a side effect")
            self.check()
        self._last_ok = self._clock.monotonic()

    def stop(self) -> None:
        """Stop renewing (the caller releases the lease)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._interval_s + 1)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                ok = self._leases.renew(self._session_id, self._owner, self._ttl_ms)
            except Exception as exc:  # broker/Redis outage: keep trying until the TTL runs out
                log.warning("lease renewal for %s failed: %s", self._session_id, exc)
                if (self._clock.monotonic() - self._last_ok) * 1000 >= self._ttl_ms:
                    self._mark_lost("no successful renewal for a whole ttl")
                    return
                continue
            if not ok:
                self._mark_lost("renewal refused: the lease belongs to someone else or expired")
                return
            self._last_ok = self._clock.monotonic()

    def _mark_lost(self, why: str) -> None:
        log.warning("lease_lost session=%s owner=%s: %s", self._session_id, self._owner, why)
        self._lost.set()
