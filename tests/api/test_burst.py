"""A real ``nahida serve`` under a steering burst and a saturated ledger (docs/api.md "Bursts").

Twelve concurrent steer/cancel requests on one session took 31 s and one got
a 500 (``QueuePool limit reached``).  Now 200 are all served, none waits
longer than the server's bounded waits allow, and a request that cannot get
a slot, a connection or a row lock in time is a 503 with ``Retry-After`` --
never a 500, never a hang.  The p99 target (2 s on this machine) is the
benchmark's to measure (``python -m bench.api_burst``, README "Status in
figures"): the suite runs beside other test processes, where a wall-time
target would measure them.  The burst publishes a
task per steer, so the server gets a private ``redis-server`` as its broker.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from bench.api_burst import TARGET_P99_S, burst, post_sessions
from bench.chaos_rig import RedisServer
from nahida_workers.testing.fleet import Fleet, make_repo
from tests.api.conftest import Server, start_server
from tests.conftest import need_service

pytestmark = pytest.mark.slow


@pytest.fixture
def private_fleet(postgres_url: str, pg: object, tmp_path: Path) -> Iterator[Fleet]:
    """A fleet whose Redis (the broker) is a private ``redis-server``, on the emptied ledger."""
    if shutil.which("redis-server") is None:
        need_service("redis-server", FileNotFoundError("redis-server is not on PATH"))
    redis_server = RedisServer(tmp_path)
    redis_server.start()
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        yield Fleet(postgres_url=postgres_url, redis_url=redis_server.url, workdir=logs)
    finally:
        redis_server.stop()


def _served(statuses: dict[int, int], *, requests: int, cancels: int) -> bool:
    """Every request answered 202 -- but a cancel may find the session already sealed.

    A cancel seals a session no worker holds at once (DESIGN.md section 8), so
    a cancel right behind another one, with no steer between them to reopen
    the session, is told 409 ``session_done``; steers are always 202.
    """
    return (
        set(statuses) <= {202, 409}
        and statuses.get(409, 0) <= cancels
        and (sum(statuses.values()) == requests)
    )


def _pg_dsn(postgres_url: str) -> str:
    return postgres_url.replace("postgresql+psycopg://", "postgresql://")


#: No request of the burst may take longer (seconds): the server's waits are bounded
#: (admission queue timeout + lock timeout, docs/api.md "Bursts"); before, 31 s and a 500.
MAX_WAIT_S = 10.0


def test_200_concurrent_steer_and_cancel_requests_are_served_within_bounded_waits(
    private_fleet: Fleet, tmp_path: Path
) -> None:
    # Every steer is a real ledger write (the inbox bound is raised), all on
    # one session: the row lock they share is the worst case.
    server = start_server(private_fleet, tmp_path, NAHIDA_INBOX_MAX_USER="100000")
    try:
        ids = post_sessions(server.url, make_repo(tmp_path / "repo"), 1, {})
        # A running server: its pool's connections are open and its statements
        # prepared (the first requests of a fresh process do that).
        warm = asyncio.run(burst(server.url, ids, requests=16, cancel_every=4))
        assert _served(warm.statuses, requests=16, cancels=4), warm.line()
        result = asyncio.run(burst(server.url, ids, requests=200, cancel_every=10))
    finally:
        server.stop()
    assert _served(result.statuses, requests=200, cancels=20), result.line()
    assert max(result.latencies) < MAX_WAIT_S, result.line()
    assert "Traceback" not in server.log.read_text()
    print(f"{result.line()} (benchmark target p99 < {TARGET_P99_S} s)")


def test_a_held_row_lock_or_a_full_line_is_a_503_with_retry_after_within_bounds(
    private_fleet: Fleet, postgres_url: str, tmp_path: Path
) -> None:
    # One slot, a short line and a short lock timeout: the test holds the
    # session's row lock, so the steer that takes the slot waits on the lock
    # and the requests behind it wait in line.
    server = start_server(
        private_fleet,
        tmp_path,
        NAHIDA_API_DB_POOL_SIZE="1",
        NAHIDA_API_QUEUE_TIMEOUT_S="0.5",
        NAHIDA_API_LOCK_TIMEOUT_MS="1500",
    )
    try:
        [session_id] = post_sessions(server.url, make_repo(tmp_path / "repo"), 1, {})
        steer = f"/v1/sessions/{session_id}/steer"
        with psycopg.connect(_pg_dsn(postgres_url)) as holder, server.client() as http:
            holder.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id])
            answers: dict[str, httpx.Response] = {}
            started = time.monotonic()
            locked = threading.Thread(
                target=lambda: answers.update(steer=http.post(steer, json={"text": "a"}))
            )
            locked.start()
            _wait_for_lock_waiter(postgres_url)  # the steer holds the slot, waiting on the lock
            answers["queued"] = http.get(f"/v1/sessions/{session_id}")
            locked.join(timeout=30)
            elapsed = time.monotonic() - started
            holder.rollback()
            for name, code in (("queued", "NAHIDA_API_QUEUE_TIMEOUT_S"), ("steer", "lock")):
                response = answers[name]
                assert response.status_code == 503, (name, response.text)
                assert response.headers["retry-after"] == "1", name
                assert response.json()["error"]["code"] == "busy"
                assert code in response.json()["error"]["message"], response.text
            assert elapsed < 10, f"the waits are bounded, took {elapsed:.1f} s"
            after = http.post(steer, json={"text": "b"})  # the lock is gone: served again
            assert after.status_code == 202, after.text
    finally:
        server.stop()
    assert "Traceback" not in server.log.read_text()


def _wait_for_lock_waiter(postgres_url: str) -> None:
    """Until a backend waits on a lock (the steer behind the test's row lock)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(_pg_dsn(postgres_url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.02)
    raise AssertionError("no request waited on the row lock")


def test_a_burst_needs_a_token_first_and_takes_no_slot_without_it(
    private_fleet: Fleet, tmp_path: Path
) -> None:
    # A flood without the token is refused before admission: it cannot
    # crowd out the requests that carry it.
    server: Server = start_server(
        private_fleet, tmp_path, NAHIDA_API_TOKEN="s3cret", NAHIDA_API_DB_POOL_SIZE="1"
    )
    try:
        auth = {"Authorization": "Bearer s3cret"}
        ids = post_sessions(server.url, make_repo(tmp_path / "repo"), 1, auth)
        refused = asyncio.run(
            burst(server.url, ids, requests=100, cancel_every=0, headers={"X-Nothing": "1"})
        )
        assert refused.statuses == {401: 100}, refused.line()
        served = asyncio.run(burst(server.url, ids, requests=20, cancel_every=0, headers=auth))
        assert served.statuses == {202: 20}, served.line()
    finally:
        server.stop()
