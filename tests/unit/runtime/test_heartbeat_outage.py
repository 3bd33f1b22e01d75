"""The heartbeat through a lease-store outage (DESIGN.md section 4).

While the store does not answer, the heartbeat keeps trying within the lease
TTL (every ``LEASE_OUTAGE_RETRY_S``); a store that comes back empty is
re-taken with the owner's own token, a re-take is noted for the run's
record, and only a whole TTL without contact counts as a loss
(``lease_unreachable``): after that the key may have expired and been taken,
so the owner must stop -- the ledger's fence covers any write that slips
through.  "A whole TTL" is measured on the Clock port (a fake here).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from nahida_workers.errors import LeaseLostError
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.runtime.ownership.heartbeat import Heartbeat, LeaseNote
from nahida_workers.testing import FakeClock

TTL_MS = 300


def wait_for(predicate: Callable[[], bool], what: str, *, deadline_s: float = 5.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class RestartingStore(MemoryLeaseStore):
    """A store that can go down (every call raises) and come back empty."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock.monotonic_ms)
        self.down = threading.Event()
        self.failures = 0

    def _reach(self) -> None:
        if self.down.is_set():
            self.failures += 1
            raise ConnectionError("Connection refused (test)")

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        self._reach()
        return super().renew(session_id, owner, ttl_ms)

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        self._reach()
        return super().acquire(session_id, owner, ttl_ms)

    def holder(self, session_id: str) -> str | None:
        self._reach()
        return super().holder(session_id)

    def go_down(self) -> None:
        """The server stops; when it starts again it holds no key."""
        self.down.set()
        with self._lock:
            self._leases.clear()


def test_a_store_down_for_less_than_a_ttl_and_back_empty_is_retaken() -> None:
    clock = FakeClock()
    store = RestartingStore(clock)
    assert store.acquire("s1", "owner-A", TTL_MS)
    with Heartbeat(store, "s1", "owner-A", TTL_MS, clock=clock) as heartbeat:
        heartbeat.watch_epoch(lambda: True)
        store.go_down()
        wait_for(lambda: store.failures >= 3, "renewals to fail a few times")
        clock.advance(TTL_MS / 1000 / 2)  # half a TTL without contact
        store.down.clear()
        wait_for(lambda: store.holder("s1") == "owner-A", "the owner to re-take its lease")
        heartbeat.check()
        assert not heartbeat.lost
        assert heartbeat.take_notes() == [LeaseNote("retaken", "lease_store_empty")]
        assert heartbeat.take_notes() == []


def test_a_whole_ttl_without_contact_is_a_loss_named_lease_unreachable() -> None:
    clock = FakeClock()
    store = RestartingStore(clock)
    assert store.acquire("s1", "owner-A", TTL_MS)
    with Heartbeat(store, "s1", "owner-A", TTL_MS, clock=clock) as heartbeat:
        store.go_down()
        wait_for(lambda: store.failures >= 1, "a renewal to fail")
        clock.advance(TTL_MS / 1000 + 0.01)  # a whole TTL without contact
        wait_for(lambda: heartbeat.lost, "the heartbeat to give up")
        store.down.clear()
        with pytest.raises(LeaseLostError) as raised:
            heartbeat.check()
    assert raised.value.reason == "lease_unreachable"
    assert store.holder("s1") is None, "a lost owner does not re-take when the store is back"


def test_confirm_before_a_side_effect_rides_out_a_short_outage() -> None:
    clock = FakeClock()
    store = RestartingStore(clock)
    assert store.acquire("s1", "owner-A", TTL_MS)
    heartbeat = Heartbeat(store, "s1", "owner-A", TTL_MS, clock=clock)  # no thread: confirm alone
    store.go_down()

    def come_back() -> None:
        wait_for(lambda: store.failures >= 2, "confirm to retry")
        store.down.clear()

    helper = threading.Thread(target=come_back)
    helper.start()
    heartbeat.confirm()  # returns once the lease is ours again
    helper.join()
    assert store.holder("s1") == "owner-A" and not heartbeat.lost


def test_a_retake_that_finds_the_epoch_moved_releases_the_key_and_is_a_loss() -> None:
    clock = FakeClock()
    store = RestartingStore(clock)
    assert store.acquire("s1", "owner-A", TTL_MS)
    current = [True, False]  # checked before the SET (still ours) and after it (moved)
    heartbeat = Heartbeat(store, "s1", "owner-A", TTL_MS, clock=clock)
    heartbeat.watch_epoch(lambda: current.pop(0))
    store.go_down()
    store.down.clear()
    with pytest.raises(LeaseLostError) as raised:
        heartbeat.confirm()
    assert raised.value.reason == "epoch_bumped"
    assert store.holder("s1") is None, "the key re-taken by mistake is given back"
