"""Fencing with a real paused process (issue 6 item 5, DESIGN.md section 4).

An owner stopped with SIGSTOP past its lease TTL, then resumed with SIGCONT,
writes no row and runs no further tool: another worker took the session over
(new epoch) and finished it.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import LEASE_DB, Fleet, make_repo, submit, wait_done, wait_for

pytestmark = pytest.mark.slow


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_paused_owner_resumed_after_its_lease_writes_nothing_and_runs_nothing(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url, redis_server, logs, lease_ttl_s=1.5, visibility_timeout_s=600)
    try:
        repo = make_repo(tmp_path / "repo")
        first, second = repo / "first.txt", repo / "second.txt"  # Bash writes nowhere else
        spec = scripted_spec(
            [
                {
                    "text": "step 1",
                    "tool_calls": [
                        {
                            "id": "slow",
                            "name": "Bash",
                            "arguments": {"command": f"echo a >> {first}; sleep 4"},
                        }
                    ],
                },
                {
                    "text": "step 2",
                    "tool_calls": [
                        {
                            "id": "next",
                            "name": "Bash",
                            "arguments": {"command": f"echo b >> {second}"},
                        }
                    ],
                },
                {"text": "Finished after a takeover."},
            ],
            tools=("Bash",),
        )
        paused = fleet.start_worker(name="paused")
        dispatcher = fleet.dispatcher(pg)
        sid = submit(dispatcher, spec, repo)
        wait_for(lambda: _lines(first), timeout=20, what="the first owner to start its tool")
        paused.kill(signal.SIGSTOP)
        leases = RedisLeaseStore.from_url(f"{redis_server}/{LEASE_DB}", key_prefix=fleet.prefix)
        wait_for(lambda: leases.holder(sid) is None, timeout=10, what="the lease to expire")
        sweeper = Sweeper(pg, leases, dispatcher, SystemClock(), redispatch_after_s=0.1)
        redispatched = wait_for(  # once the session has been quiet for redispatch_after_s
            lambda: sweeper.sweep().redispatched, timeout=10, what="the sweeper to re-dispatch"
        )
        assert redispatched == (sid,)
        fleet.start_worker(name="heir")
        wait_done(pg, sid, timeout=30)
        run = pg.runs_of(sid)[0]
        before = pg.events(run.run_id)
        epochs = {e.epoch for e in before[1:]}
        assert epochs == {1, 2}, epochs  # the paused owner at 1 before it stopped, the heir at 2

        paused.kill(signal.SIGCONT)  # the paused owner wakes up, its Bash has finished
        wait_for(
            lambda: "lease_lost" in paused.text(),
            timeout=20,
            what="the resumed owner to notice it lost the lease",
        )
        wait_for(  # the resumed owner's delivery ends: a wrong implementation wrote or ran by now
            lambda: re.search(r"run_session\[[^\]]*\] (succeeded|raised)", paused.text()),
            timeout=20,
            what="the resumed owner's delivery to end",
        )
        after = pg.events(run.run_id)
        assert after == before, "the resumed owner wrote a row"
        assert _lines(second) == ["b"], "the resumed owner ran a further tool"
        assert _lines(first) == ["a"]
        slow = next(e for e in after if e.type is EventType.TOOL_RESULT and e.call_id == "slow")
        assert slow.payload["status"] == "interrupted" and slow.epoch == 2
        last_epoch1 = max(e.sequence for e in after if e.epoch == 1)
        first_epoch2 = min(e.sequence for e in after if e.epoch == 2)
        assert last_epoch1 < first_epoch2, "no row of the old epoch after the new owner's"
        assert all(r.epoch == 2 for r in pg.receipts(run.run_id))
    finally:
        fleet.stop()
