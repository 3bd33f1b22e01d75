r"""What the dashboard asks the broker: queue depths and live workers, or "unknown".

The broker is not the ledger: it may be down, or in another process's memory
(``memory://``, the embedded mode).  Then the answer is None and the page
says "unknown" -- never a zero that reads as "idle".  Each answer is kept
for :data:`CACHE_S` seconds so a dashboard open in many tabs asks once.

Queue depth on a Redis broker is the length of the queue's lists: kombu
keeps one list per priority step (``sessions``, ``sessions\\x06\\x161`` ...,
``celery/config.py`` sets the steps), so the depth is their sum.
Live workers are the replies to Celery's ``ping`` broadcast.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from nahida_workers.constants import MAX_PRIORITY, SESSIONS_QUEUE, TOOLS_QUEUE

__all__ = ["BrokerProbe"]

#: Seconds an answer is reused.
CACHE_S = 5.0
#: Seconds the broker is given to answer (a socket timeout, and Celery's ping wait).
PROBE_TIMEOUT_S = 0.5
#: kombu's separator between a queue's name and its priority step (Redis transport).
PRIORITY_SEP = "\x06\x16"

T = TypeVar("T")


class BrokerProbe:
    """Cached broker reads for the dashboard.

    Args:
        broker_url: ``NAHIDA_BROKER_URL``.
        celery_app: the server's Celery app (None: live workers are unknown).
        clock: a monotonic clock, seconds (tests pass their own).
    """

    def __init__(
        self,
        broker_url: str,
        celery_app: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_url = broker_url
        self.celery_app = celery_app
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}

    def _cached(self, key: str, read: Callable[[], T]) -> T:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and self._clock() - hit[0] < CACHE_S:
                return hit[1]  # type: ignore[no-any-return]
        value = read()
        with self._lock:
            self._cache[key] = (self._clock(), value)
        return value

    @property
    def reachable_kind(self) -> bool:
        """Whether the broker is one this process can ask (Redis), not another's memory."""
        return self.broker_url.startswith(("redis://", "rediss://", "redis+socket://"))

    def queue_depths(self) -> dict[str, int | None]:
        """Messages waiting per queue (``sessions``, ``tools``); None: unknown."""
        return self._cached("queues", self._read_depths)

    def live_workers(self) -> list[str] | None:
        """The names of the workers that answered a ping; None: unknown."""
        return self._cached("workers", self._read_workers)

    def _read_depths(self) -> dict[str, int | None]:
        unknown: dict[str, int | None] = {SESSIONS_QUEUE: None, TOOLS_QUEUE: None}
        if not self.reachable_kind:
            return unknown
        import redis

        try:
            client = redis.Redis.from_url(
                self.broker_url,
                socket_timeout=PROBE_TIMEOUT_S,
                socket_connect_timeout=PROBE_TIMEOUT_S,
            )
            try:
                out: dict[str, int | None] = {}
                for queue in (SESSIONS_QUEUE, TOOLS_QUEUE):
                    pipe = client.pipeline(transaction=False)
                    pipe.llen(queue)
                    for step in range(1, MAX_PRIORITY + 1):
                        pipe.llen(f"{queue}{PRIORITY_SEP}{step}")
                    out[queue] = sum(int(n) for n in pipe.execute())
                return out
            finally:
                client.close()
        except (redis.RedisError, OSError, ValueError):
            return unknown

    def _read_workers(self) -> list[str] | None:
        if self.celery_app is None or not self.reachable_kind:
            return None
        try:
            replies = self.celery_app.control.inspect(timeout=PROBE_TIMEOUT_S).ping() or {}
        except Exception:  # the broker is down: say unknown, never "no workers"
            return None
        return sorted(str(name) for name in replies)
