"""One contract suite for every lease store (DESIGN.md section 4, case B04).

The ``lease_store`` fixture runs each test against the in-memory twin,
fakeredis and the real Redis server.  Expiry is real: a test that needs a
TTL to pass polls ``holder()`` with a deadline instead of sleeping blindly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.errors import LeaseLostError
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ports import LeaseStore
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.heartbeat import Heartbeat
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec
from tests.conftest import load_case

DEADLINE_S = 5.0
SHORT_TTL_MS = 150
LONG_TTL_MS = 30_000


def wait_for(predicate: Callable[[], bool], what: str, *, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``predicate`` every 5 ms until it holds; fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(0.005)


def test_acquire_is_exclusive(lease_store: LeaseStore) -> None:
    assert lease_store.holder("s1") is None
    assert lease_store.ttl_ms("s1") is None
    assert lease_store.acquire("s1", "owner-A", LONG_TTL_MS) is True
    assert lease_store.acquire("s1", "owner-B", LONG_TTL_MS) is False
    assert lease_store.acquire("s1", "owner-A", LONG_TTL_MS) is False  # not re-entrant
    assert lease_store.holder("s1") == "owner-A"
    assert lease_store.acquire("s2", "owner-B", LONG_TTL_MS) is True  # leases are per session


def test_renew_by_the_owner_extends(lease_store: LeaseStore) -> None:
    assert lease_store.acquire("s1", "owner-A", 5_000)
    before = lease_store.ttl_ms("s1")
    assert before is not None and 0 < before <= 5_000
    assert lease_store.renew("s1", "owner-A", 60_000) is True
    after = lease_store.ttl_ms("s1")
    assert after is not None and 5_000 < after <= 60_000
    assert lease_store.holder("s1") == "owner-A"


def test_renew_by_another_owner_changes_nothing(lease_store: LeaseStore) -> None:
    assert lease_store.acquire("s1", "owner-A", 5_000)
    assert lease_store.renew("s1", "owner-B", 60_000) is False
    ttl = lease_store.ttl_ms("s1")
    assert ttl is not None and 0 < ttl <= 5_000, "B's renewal must not touch A's TTL"
    assert lease_store.holder("s1") == "owner-A"
    assert lease_store.renew("nobody-holds-this", "owner-B", 60_000) is False
    assert lease_store.holder("nobody-holds-this") is None


def test_release_by_another_owner_changes_nothing(lease_store: LeaseStore) -> None:
    assert lease_store.acquire("s1", "owner-A", LONG_TTL_MS)
    assert lease_store.release("s1", "owner-B") is False
    assert lease_store.holder("s1") == "owner-A"
    assert lease_store.acquire("s1", "owner-B", LONG_TTL_MS) is False


def test_release_by_the_owner_frees_the_lease(lease_store: LeaseStore) -> None:
    assert lease_store.acquire("s1", "owner-A", LONG_TTL_MS)
    assert lease_store.release("s1", "owner-A") is True
    assert lease_store.holder("s1") is None
    assert lease_store.ttl_ms("s1") is None
    assert lease_store.release("s1", "owner-A") is False  # a second release owns nothing
    assert lease_store.acquire("s1", "owner-B", LONG_TTL_MS) is True


def test_an_expired_lease_can_be_taken(lease_store: LeaseStore) -> None:
    assert lease_store.acquire("s1", "owner-A", SHORT_TTL_MS)
    assert lease_store.acquire("s1", "owner-B", SHORT_TTL_MS) is False
    wait_for(lambda: lease_store.holder("s1") is None, "the lease to expire")
    assert lease_store.ttl_ms("s1") is None
    assert lease_store.renew("s1", "owner-A", LONG_TTL_MS) is False  # too late to renew
    assert lease_store.acquire("s1", "owner-B", LONG_TTL_MS) is True
    assert lease_store.holder("s1") == "owner-B"


def _raw(lease_store: LeaseStore, session_id: str) -> tuple[str | None, int | None]:
    """What the server itself holds: (GET, PTTL) for Redis, the dict for the twin."""
    if isinstance(lease_store, RedisLeaseStore):
        client: Any = lease_store._client
        value = client.get(lease_store.key(session_id))
        pttl = int(client.pttl(lease_store.key(session_id)))
        return (None if value is None else value.decode(), pttl)
    return lease_store.holder(session_id), lease_store.ttl_ms(session_id)


def test_b04_an_expired_holder_cannot_release_the_new_owners_lease(
    lease_store: LeaseStore,
) -> None:
    """Case B04 replayed with a short TTL: A stalls past it, B takes over, A releases."""
    case = load_case("B04")
    timeline: list[dict[str, Any]] = case["input"]["timeline"]  # type: ignore[index]
    owner = {step["actor"]: step["cmd"].split()[2] for step in timeline if "cmd" in step}
    session_id = str(case["input"]["lease_key"]).removeprefix("lease:session:")  # type: ignore[index]
    a, b, c = owner["A"], owner["B"], owner["C"]

    assert lease_store.acquire(session_id, a, SHORT_TTL_MS) is True  # t=0
    # t=0..45: A stalls, sends no renewals; the server expires the key at t=30
    wait_for(lambda: lease_store.holder(session_id) is None, "A's lease to expire")
    assert lease_store.acquire(session_id, b, LONG_TTL_MS) is True  # t=31
    assert lease_store.release(session_id, a) is False  # t=45: "not owned"
    value, pttl = _raw(lease_store, session_id)
    assert value == b
    assert pttl is not None and pttl > 0
    assert lease_store.acquire(session_id, c, LONG_TTL_MS) is False  # t=46
    assert lease_store.holder(session_id) == b


def test_b04_the_runner_that_lost_its_lease_logs_lease_lost_and_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B04 through SessionRunner: A stalls in a provider call past its TTL; B takes over.

    A must not write a row after B bumped the epoch, must not delete B's lease,
    and must log ``lease_lost`` (never "released").
    """
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    ledger = MemoryLedger()
    runner = memory_runner(ledger=ledger, clock=clock)
    runner.lease_ttl_ms = 30_000
    leases = runner.leases
    spec = scripted_spec([{"text": "done"}], tools=[])
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(tmp_path))
    sid = session.session_id

    real_provider_for = runner.provider_for

    class StallingProvider:
        """A's provider call: the process stalls 45 s; meanwhile B takes over."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.name, self.model = inner, inner.name, inner.model

        def complete(self, request: Any, **kw: Any) -> Any:
            clock.advance(31)  # the key expired on the store's clock at t=30
            assert leases.acquire(sid, "owner-B-19ad", 30_000)
            ledger.bump_epoch(sid, at=clock.now())  # B fences A out
            clock.advance(14)
            return self.inner.complete(request, **kw)

    runner.provider_for = lambda s: StallingProvider(real_provider_for(s))
    before = ledger.events(ledger.runs_of(sid)[0].run_id)
    with caplog.at_level(logging.INFO, logger="nahida_workers.runtime.ownership.session"):
        outcome = runner.run(sid)
    assert outcome is SessionOutcome.LEASE_LOST
    assert ledger.events(ledger.runs_of(sid)[0].run_id) == before
    assert leases.holder(sid) == "owner-B-19ad"
    assert (leases.ttl_ms(sid) or 0) > 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("lease_lost" in m for m in messages), messages
    assert not any("released" in m for m in messages), messages


# -- heartbeat ------------------------------------------------------------------------------


def test_heartbeat_keeps_the_lease_alive_past_several_ttls() -> None:
    store = MemoryLeaseStore()
    assert store.acquire("s1", "owner-A", SHORT_TTL_MS)
    started = time.monotonic()
    with Heartbeat(store, "s1", "owner-A", SHORT_TTL_MS) as heartbeat:
        # the lease would expire 150 ms after acquire; watch it live for 4 TTLs
        while time.monotonic() - started < 4 * SHORT_TTL_MS / 1000:
            assert store.holder("s1") == "owner-A"
            assert not heartbeat.lost
            heartbeat.check()
            time.sleep(0.01)
    assert store.holder("s1") == "owner-A"
    assert not heartbeat.lost


def test_heartbeat_reports_a_lease_taken_by_another_owner() -> None:
    store = MemoryLeaseStore()
    assert store.acquire("s1", "owner-A", SHORT_TTL_MS)
    with Heartbeat(store, "s1", "owner-A", SHORT_TTL_MS) as heartbeat:
        heartbeat.check()
        with store._lock:  # the key vanished on the server (forced delete) ...
            del store._leases["s1"]
        assert store.acquire("s1", "owner-B", LONG_TTL_MS)  # ... and B took it
        wait_for(lambda: heartbeat.lost, "the heartbeat to notice")
        with pytest.raises(LeaseLostError):
            heartbeat.check()
    assert store.holder("s1") == "owner-B", "a losing heartbeat must not touch B's lease"
    ttl = store.ttl_ms("s1")
    assert ttl is not None and ttl > SHORT_TTL_MS


class _UnreachableStore(MemoryLeaseStore):
    """Renewals fail as if Redis were unreachable (the key may expire meanwhile)."""

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        raise ConnectionError("redis unreachable (test)")


def test_heartbeat_presumes_the_lease_lost_after_a_ttl_without_renewal() -> None:
    store = _UnreachableStore()
    assert store.acquire("s1", "owner-A", SHORT_TTL_MS)
    with Heartbeat(store, "s1", "owner-A", SHORT_TTL_MS) as heartbeat:
        wait_for(lambda: heartbeat.lost, "the heartbeat to give up")
        with pytest.raises(LeaseLostError):
            heartbeat.check()


class _ScriptedStop(threading.Event):
    """The heartbeat's stop event: records each wait's timeout; "the interval passed" N times."""

    def __init__(self, intervals: int) -> None:
        super().__init__()
        self.intervals = intervals
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return len(self.waits) > self.intervals


class _RecordingStore(MemoryLeaseStore):
    def __init__(self) -> None:
        super().__init__()
        self.renewals: list[tuple[str, str, int]] = []

    def renew(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        self.renewals.append((session_id, owner, ttl_ms))
        return super().renew(session_id, owner, ttl_ms)


def test_heartbeat_renews_every_third_of_the_ttl_to_the_full_ttl_as_its_owner() -> None:
    """DESIGN.md section 4: "a heartbeat renews at ttl/3" -- checked without wall time.

    The renewal thread waits ``ttl/3`` between renewals (the waits are
    recorded, not slept) and each renewal is the owner's compare-and-set to the
    full TTL.
    """
    store = _RecordingStore()
    assert store.acquire("s1", "owner-A", LONG_TTL_MS)
    heartbeat = Heartbeat(store, "s1", "owner-A", LONG_TTL_MS)
    stop = _ScriptedStop(intervals=3)
    heartbeat._stop = stop
    with heartbeat:
        wait_for(lambda: len(stop.waits) == 4, "the renewal thread to run three intervals")
    assert stop.waits == [LONG_TTL_MS / 3000] * 4
    assert store.renewals == [("s1", "owner-A", LONG_TTL_MS)] * 3
    assert not heartbeat.lost
