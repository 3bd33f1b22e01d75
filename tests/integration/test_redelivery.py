"""No session lost to a delivery that found its lease held; poison sessions end (issue 10).

Real ``celery -A tasks worker`` processes (prefork and threads pools) over
the real Redis and PostgreSQL, real SIGKILLs, and no beat: nothing but the
workers themselves may bring a session back.

Item 1: a delivery that finds the lease held leaves a follow-up for when the
lease it saw would expire (``runtime/ownership/redelivery.py``), so a dead owner is
always followed by a taker:

* prefork: the pool child that owns the session is SIGKILLed mid-Bash; the
  parent requeues the message at once, the next child finds the dead
  child's lease still live -- and must not be the last delivery;
* threads: a visibility-timeout redelivery of a long run finds the lease
  held and is acked, which takes the owner's own message out of the broker;
  then the owner's worker is SIGKILLed.

Item 2: a session whose every delivery kills its own worker (``kill -9
$PPID`` from Bash) ends ``failed/poison_session`` after 3 crashes in a row,
counted in the ledger.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import (
    LEASE_DB,
    Fleet,
    Worker,
    make_repo,
    submit,
    terminal_events,
    wait_done,
    wait_for,
)

pytestmark = pytest.mark.slow


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _leases(fleet: Fleet, redis_server: str) -> RedisLeaseStore:
    return RedisLeaseStore.from_url(f"{redis_server}/{LEASE_DB}", key_prefix=fleet.prefix)


def _owner_pid(leases: RedisLeaseStore, session_id: str) -> int:
    holder = wait_for(lambda: leases.holder(session_id), timeout=20, what="a lease owner")
    return int(str(holder).split(":")[1])


def _slow_bash_spec(marker: Path, sleep_s: float) -> object:
    return scripted_spec(
        [
            {
                "text": "Running it.",
                "tool_calls": [
                    {
                        "id": "slow",
                        "name": "Bash",
                        "arguments": {"command": f"echo ran >> {marker}; sleep {sleep_s}"},
                    }
                ],
            },
            {"text": "The command was interrupted; stopping here."},
        ]
    )


def _ended_once_with_the_call_interrupted(pg: SqlLedger, sid: str, marker: Path) -> None:
    (run,) = pg.runs_of(sid)
    events = pg.events(run.run_id)
    assert len(terminal_events(pg, run.run_id)) == 1
    assert events[-1].type is EventType.TERMINAL
    (result,) = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert result.payload["status"] == ToolStatus.INTERRUPTED.value
    assert _lines(marker) == ["ran"], "the killed command must not run again"
    (receipt,) = pg.receipts(run.run_id)
    assert receipt.status is ToolStatus.INTERRUPTED  # every call has a receipt (item 7)


def test_prefork_child_killed_mid_bash_is_followed_by_a_taker_without_beat(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    # A visibility timeout far beyond the test: only the workers can bring it back.
    # The lease TTL outlasts the pool parent's noticing the lost child (about a
    # second on a loaded machine), as the 30 s default does in production.
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=6.0, visibility_timeout_s=600)
    try:
        worker = fleet.start_worker(name="pf", concurrency=2, pool="prefork")
        repo = make_repo(tmp_path / "repo")
        marker = repo / "marker.txt"  # inside the workspace: Bash writes nowhere else
        sid = submit(fleet.dispatcher(pg), _slow_bash_spec(marker, 20), repo)  # type: ignore[arg-type]
        wait_for(lambda: _lines(marker), timeout=30, what="the Bash tool to start")
        child = _owner_pid(_leases(fleet, redis_server), sid)
        assert child != worker.proc.pid, "the lease must be held by a pool child"
        os.kill(child, signal.SIGKILL)  # the OOM killer's way
        wait_done(pg, sid, timeout=45)
        _ended_once_with_the_call_interrupted(pg, sid, marker)
        log = worker.text()
        assert "lease held" in log, "the requeued copy found the dead child's lease"
        assert "follow-up delivery" in log
        assert worker.proc.poll() is None, "the pool parent lives on"
    finally:
        fleet.stop()


def test_threads_owner_killed_after_its_message_was_acked_by_a_copy(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=1.0, visibility_timeout_s=3.0)
    try:
        workers = [fleet.start_worker(name=n, concurrency=1) for n in ("A", "B")]
        repo = make_repo(tmp_path / "repo")
        marker = repo / "marker.txt"  # inside the workspace: Bash writes nowhere else
        sid = submit(fleet.dispatcher(pg), _slow_bash_spec(marker, 15), repo)  # type: ignore[arg-type]
        wait_for(lambda: _lines(marker), timeout=30, what="the Bash tool to start")
        owner_pid = _owner_pid(_leases(fleet, redis_server), sid)
        (owner,) = [w for w in workers if w.proc.pid == owner_pid]
        (other,) = [w for w in workers if w is not owner]
        # The broker redelivers the running session (visibility timeout 3 s); the
        # copy finds the lease held and is acked -- and with it the owner's message.
        wait_for(lambda: "lease held" in other.text(), timeout=20, what="the redelivered copy")
        owner.kill(signal.SIGKILL)
        owner.proc.wait(timeout=10)
        wait_done(pg, sid, timeout=40)
        _ended_once_with_the_call_interrupted(pg, sid, marker)
        assert "follow-up delivery" in other.text()
    finally:
        fleet.stop()


def _supervise(fleet: Fleet, pool: str, until: float, pg: SqlLedger, sid: str) -> list[Worker]:
    """Keep one worker running (a supervisor's restart) until the session is done."""
    started: list[Worker] = []
    while time.monotonic() < until:
        session = pg.get_session(sid)
        if session is not None and session.status.value == "done":
            return started
        if not started or started[-1].proc.poll() is not None:
            started.append(fleet.start_worker(name=f"w{len(started)}", concurrency=2, pool=pool))
        time.sleep(0.2)
    raise AssertionError(f"session {sid} did not end; {len(started)} workers started")


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_session_that_kills_its_worker_every_time_ends_poison_session(
    pool: str, postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    # The command kills the worker that runs it (standing in for any crash of
    # the worker mid-call): only an unsandboxed command can reach its worker.
    fleet = Fleet(
        postgres_url,
        redis_server,
        logs,
        lease_ttl_s=1.0,
        visibility_timeout_s=3.0,
        extra_env={"NAHIDA_SANDBOX": "none"},
    )
    try:
        repo = make_repo(tmp_path / "repo")
        marker = tmp_path / "kills.txt"
        kill = {"command": f"echo k >> {marker}; kill -9 $PPID; sleep 5"}
        turns = [
            {
                "text": f"Try {n}.",
                "tool_calls": [{"id": f"k{n}", "name": "Bash", "arguments": kill}],
            }
            for n in range(8)
        ]
        spec = scripted_spec([*turns, {"text": "Survived."}])
        sid = submit(fleet.dispatcher(pg), spec, repo)
        _supervise(fleet, pool, time.monotonic() + 150, pg, sid)
        (run,) = pg.runs_of(sid)
        assert (run.terminal_state.value, run.terminal_reason.value) == (  # type: ignore[union-attr]
            "failed",
            "poison_session",
        )
        assert run.failure_code is not None and run.failure_code.value == "poison_session"
        assert _lines(marker) == ["k", "k", "k"], "3 crashed deliveries, then no more"
        assert len(terminal_events(pg, run.run_id)) == 1
        events = pg.events(run.run_id)
        calls = [e.call_id for e in events if e.type is EventType.TOOL_CALL]
        results = [e for e in events if e.type is EventType.TOOL_RESULT]
        assert sorted(e.call_id for e in results) == sorted(calls) == ["k0", "k1", "k2"]
        assert all(e.payload["status"] == "interrupted" for e in results)
        assert sorted(r.call_id for r in pg.receipts(run.run_id)) == ["k0", "k1", "k2"]
        # The owner hands the session back (close_owner) just after its seal:
        # wait for that write instead of racing it.
        wait_for(
            lambda: pg.get_session(sid).open_epoch is None,  # type: ignore[union-attr]
            timeout=10,
            what="the owner to hand the session back",
        )
        assert pg.get_session(sid).crash_streak == 0  # type: ignore[union-attr]  # the seal is progress
    finally:
        fleet.stop()
