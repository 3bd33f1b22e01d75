"""The in-memory lease twin, on an injectable monotonic clock.

Same contract as :class:`~nahida_workers.lease.redis.RedisLeaseStore`; the
contract suite runs against both.  Expiry is decided by the store's clock,
the twin of the Redis server's clock -- never by the caller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["MemoryLeaseStore"]


class MemoryLeaseStore:
    """Leases in a dict: ``{session_id: (owner, expires_at_ms)}``.

    Args:
        now_ms: the store's clock in milliseconds (tests pass a fake).
    """

    def __init__(self, now_ms: Callable[[], float] | None = None) -> None:
        self._now_ms = now_ms or (lambda: time.monotonic() * 1000.0)
        self._leases: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _live(self, session_id: str) -> tuple[str, float] | None:
        lease = self._leases.get(session_id)
        if lease is not None and lease[1] <= self._now_ms():
            del self._leases[session_id]
            return None
        return lease

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Take the lease iff nobody holds it."""
        with self._lock:
            if self._live(session_id) is not None:
                return False
            self._leases[session_id] = (owner, self._now_ms() + ttl_ms)
            return True

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Extend iff ``owner`` holds the lease."""
        with self._lock:
            lease = self._live(session_id)
            if lease is None or lease[0] != owner:
                return False
            self._leases[session_id] = (owner, self._now_ms() + ttl_ms)
            return True

    def release(self, session_id: str, owner: str) -> bool:
        """Delete iff ``owner`` holds the lease."""
        with self._lock:
            lease = self._live(session_id)
            if lease is None or lease[0] != owner:
                return False
            del self._leases[session_id]
            return True

    def holder(self, session_id: str) -> str | None:
        """Current owner or None."""
        with self._lock:
            lease = self._live(session_id)
            return None if lease is None else lease[0]

    def ttl_ms(self, session_id: str) -> int | None:
        """Remaining milliseconds or None."""
        with self._lock:
            lease = self._live(session_id)
            return None if lease is None else max(0, int(lease[1] - self._now_ms()))
