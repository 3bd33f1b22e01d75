"""Crashes around child sessions, with real worker processes (issue 13, DESIGN.md section 8).

Real ``celery -A tasks worker`` processes (prefork pool) over the real Redis
and PostgreSQL, real SIGKILLs, no beat:

* the parent's owner is killed right after its turn committed (and
  published) its children and before it parked -- a test-only pause point
  (``runtime/commits/pause_points.py``) holds it there: no second child for any
  call, and the next owner adopts each result exactly once, in call order;
* a child's owner is killed mid-Bash: the child is recovered (its call
  closed ``interrupted``, never re-run) and the parent gets one result.

A prefork pool child's death makes the pool parent requeue its message at
once; the copy finds the dead owner's lease still live and leaves a
follow-up delivery for when it expires (``runtime/ownership/redelivery.py``).
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.commits.pause_points import PAUSE_ENV
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for
from tests.integration.children_world import (
    adopted_once_in_order,
    all_done,
    bash_leaf,
    leases,
    lines,
    owner_pid,
    task,
    terminal_state,
)

pytestmark = pytest.mark.slow

CALLS = ["call_a", "call_b"]


def _fleet(postgres_url: str, redis_server: str, tmp_path: Path, **env: str) -> Fleet:
    logs = tmp_path / "logs"
    logs.mkdir()
    # The lease outlives the pool parent's noticing a lost child (as in test_redelivery).
    return Fleet(
        postgres_url, redis_server, logs, lease_ttl_s=4.0, visibility_timeout_s=600, extra_env=env
    )


def test_parent_killed_after_spawning_before_parking_adopts_each_child_once(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet = _fleet(postgres_url, redis_server, tmp_path, **{PAUSE_ENV: "commit_turn"})
    try:
        worker = fleet.start_worker(name="pf", concurrency=2, pool="prefork")
        spec = scripted_spec(
            [
                {"text": "Two areas.", "tool_calls": [task(c) for c in CALLS]},
                {"text": "Both areas done."},
            ],
            tools=["Task"],
            agents={"leaf": bash_leaf("sleep 0.3; echo ok")},
        )
        parent = submit(fleet.dispatcher(pg), spec, make_repo(tmp_path / "repo"))
        paused = wait_for(
            lambda: re.search(r"test pause after .* \(pid (\d+)\)", worker.text()),
            timeout=30,
            what="the parent's owner to pause after committing its children",
        )
        pid = int(paused.group(1))
        assert pid == owner_pid(leases(fleet, redis_server), parent) != worker.proc.pid
        (run,) = pg.runs_of(parent)
        kids = [child_id(run.run_id, c) for c in CALLS]
        assert all(pg.get_session(k) is not None for k in kids), "committed before the pause"
        assert pg.get_session(parent).status.value == "running"  # type: ignore[union-attr]
        assert not [e for e in pg.events(run.run_id) if e.payload.get("kind") == "parked"]
        os.kill(pid, signal.SIGKILL)
        wait_done(pg, parent, timeout=45)
        assert all_done(pg, kids)
        assert terminal_state(pg, parent) == "completed"
        results = adopted_once_in_order(pg, parent, CALLS)
        assert all(e.payload["content"] == "Leaf done." for e in results)
        events = pg.events(run.run_id)
        (call_epoch,) = {e.epoch for e in events if e.type is EventType.TOOL_CALL}
        assert all(e.epoch > call_epoch for e in results), "adopted by a later owner"
        assert [len(pg.runs_of(k)) for k in kids] == [1, 1]
        assert all(terminal_state(pg, k) == "completed" for k in kids)
        assert worker.proc.poll() is None, "the pool parent lives on"
    finally:
        fleet.stop()


def test_child_killed_mid_bash_is_recovered_and_adopted_once(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet = _fleet(postgres_url, redis_server, tmp_path)
    try:
        worker = fleet.start_worker(name="pf", concurrency=2, pool="prefork")
        repo = make_repo(tmp_path / "repo")
        marker = repo / "ran.txt"  # the child shares the workspace: Bash writes nowhere else
        leaf = bash_leaf(f"echo $NAHIDA_SESSION_ID >> {marker}; sleep 3; echo ok")
        spec = scripted_spec(
            [{"text": "One area.", "tool_calls": [task("call_a")]}, {"text": "Done."}],
            tools=["Task"],
            agents={"leaf": leaf},
        )
        parent = submit(fleet.dispatcher(pg), spec, repo)
        wait_for(lambda: lines(marker), timeout=30, what="the child's Bash call to start")
        (run,) = pg.runs_of(parent)
        kid = child_id(run.run_id, "call_a")
        assert lines(marker) == [kid]
        pid = owner_pid(leases(fleet, redis_server), kid)
        assert pid != worker.proc.pid
        os.kill(pid, signal.SIGKILL)
        wait_done(pg, parent, timeout=45)
        (kid_run,) = pg.runs_of(kid)  # recovered in the same run by the next owner
        kid_events = pg.events(kid_run.run_id)
        (bash,) = [e for e in kid_events if e.type is EventType.TOOL_RESULT]
        assert bash.payload["status"] == "interrupted"
        assert lines(marker) == [kid], "the killed command is not run again"
        assert terminal_state(pg, kid) == "completed"
        assert terminal_state(pg, parent) == "completed"
        (result,) = adopted_once_in_order(pg, parent, ["call_a"])
        assert result.payload["content"] == "Leaf done."
        (receipt,) = pg.receipts(run.run_id)
        assert receipt.evidence["child_run_id"] == kid_run.run_id
        assert receipt.evidence["child_state"] == "completed"
    finally:
        fleet.stop()
