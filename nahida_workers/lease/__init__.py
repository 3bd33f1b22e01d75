"""Session leases: Redis (SET NX PX + compare-and-set Lua) and an in-memory twin."""

from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.lease.redis import RedisLeaseStore

__all__ = ["MemoryLeaseStore", "RedisLeaseStore"]
