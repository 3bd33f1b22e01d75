"""The session lease on Redis (DESIGN.md section 4).

Acquire is ``SET key owner NX PX ttl``.  Renew and release are Lua scripts
that compare the stored owner token with the caller's and act only on a
match, atomically on the server: an owner never extends or deletes another
owner's lease, whatever its own clock believes (case B04).
"""

from __future__ import annotations

from typing import Any

import redis

from nahida_workers.settings import LEASE_KEY_TEMPLATE

__all__ = ["RedisLeaseStore"]

# KEYS[1] = lease key, ARGV[1] = owner token, ARGV[2] = ttl in ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS[1] = lease key, ARGV[1] = owner token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLeaseStore:
    """Leases in Redis (or fakeredis for the embedded mode).

    Args:
        client: a ``redis.Redis`` (decode_responses is not required).
        key_prefix: prepended to ``lease:session:{id}`` (tests isolate with it).
    """

    def __init__(self, client: redis.Redis | Any, *, key_prefix: str = "") -> None:
        self._client = client
        self._prefix = key_prefix
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, *, key_prefix: str = "") -> RedisLeaseStore:
        """Connect to ``url`` with short socket timeouts (seconds)."""
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return cls(client, key_prefix=key_prefix)

    def key(self, session_id: str) -> str:
        """The Redis key of a session's lease."""
        return self._prefix + LEASE_KEY_TEMPLATE.format(session_id=session_id)

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """``SET NX PX``: True iff nobody held the lease."""
        return bool(self._client.set(self.key(session_id), owner, nx=True, px=int(ttl_ms)))

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Compare-and-``PEXPIRE``: False means the lease is gone or someone else's."""
        return bool(self._renew(keys=[self.key(session_id)], args=[owner, int(ttl_ms)]))

    def release(self, session_id: str, owner: str) -> bool:
        """Compare-and-``DEL``: False means "not owned" and nothing was deleted."""
        return bool(self._release(keys=[self.key(session_id)], args=[owner]))

    def holder(self, session_id: str) -> str | None:
        """The owner token stored in the lease key, or None."""
        value = self._client.get(self.key(session_id))
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def ttl_ms(self, session_id: str) -> int | None:
        """``PTTL`` of the lease key, or None when it is not held."""
        ttl = int(self._client.pttl(self.key(session_id)))
        return ttl if ttl >= 0 else None
