"""Case B15 with real processes: parents park, children get the slots (issue 13, section 8).

A parent that waited for its children in its worker slot (``result.get()``
in a task, a monitor step) would hold every slot and the children would
never run.  Here parents park -- status ``waiting``, lease released -- and
each child's completion re-dispatches its parent.  Real ``celery -A tasks
worker`` prefork processes over the real PostgreSQL and Redis, no beat; the
ledger and the Redis ``lease:session:<id>`` keys are sampled every 0.5 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit
from tests.integration.children_world import (
    adopted_once_in_order,
    bash_leaf,
    leases,
    scripted,
    task,
    terminal_state,
)

pytestmark = pytest.mark.slow


@dataclass
class Samples:
    """What the 0.5 s samples saw."""

    waiting_with_lease: list[str] = field(default_factory=list)
    most_leases: int = 0
    waiting_seen: set[str] = field(default_factory=set)
    waiting_while_child_runs: set[str] = field(default_factory=set)


def _tree(pg: SqlLedger, roots: list[str]) -> list[str]:
    ids, todo = [], list(roots)
    while todo:
        sid = todo.pop()
        ids.append(sid)
        todo.extend(k.session_id for k in child_ledger(pg).children(sid))
    return ids


def _sample_until_done(
    pg: SqlLedger, store: RedisLeaseStore, roots: list[str], timeout: float
) -> tuple[Samples, list[str]]:
    """Sample every session's status and lease every 0.5 s until all are done."""
    seen = Samples()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = _tree(pg, roots)
        status = {i: pg.get_session(i).status for i in ids}  # type: ignore[union-attr]
        held = {i for i in ids if store.holder(i) is not None}
        seen.most_leases = max(seen.most_leases, len(held))
        for sid in ids:
            if status[sid] is not SessionStatus.WAITING:
                continue
            seen.waiting_seen.add(sid)
            kids = child_ledger(pg).children(sid)
            if any(status.get(k.session_id) is not SessionStatus.DONE for k in kids):
                seen.waiting_while_child_runs.add(sid)
            if sid in held:
                # A parker commits ``waiting`` a moment before it releases its
                # lease: a violation is one that is still there a moment later.
                time.sleep(0.2)
                again = pg.get_session(sid)
                if again.status is SessionStatus.WAITING and store.holder(sid):  # type: ignore[union-attr]
                    seen.waiting_with_lease.append(sid)
        if all(s is SessionStatus.DONE for s in status.values()) and len(ids) > len(roots):
            return seen, ids
        time.sleep(0.5)
    raise AssertionError(f"the session trees of {roots} did not finish in {timeout}s")


def _parked_events(pg: SqlLedger, sid: str) -> int:
    return sum(
        1
        for run in pg.runs_of(sid)
        for e in pg.events(run.run_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
    )


def test_b15_two_parents_with_two_children_each_on_two_slots(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    fleet.start_worker(concurrency=2, pool="prefork")
    calls = ["call_a", "call_b"]
    spec = scripted_spec(
        [
            {"text": "Splitting the work by area.", "tool_calls": [task(c) for c in calls]},
            {"text": "Both areas are summarised."},
        ],
        tools=["Task"],
        agents={"leaf": bash_leaf("sleep 3; echo ok", "Area summary: ok.")},
    )
    dispatcher, repo = fleet.dispatcher(pg), make_repo(tmp_path / "repo")
    started = time.monotonic()
    parents = [submit(dispatcher, spec, repo) for _ in range(2)]
    seen, ids = _sample_until_done(pg, leases(fleet, redis_server), parents, timeout=60)
    assert time.monotonic() - started < 60
    assert len(ids) == 6
    assert all(terminal_state(pg, s) == "completed" for s in ids)
    assert seen.waiting_with_lease == [], "a waiting session held a lease (a slot)"
    assert seen.most_leases <= 2
    assert seen.waiting_while_child_runs == set(parents)  # the ledger showed each one waiting
    for parent in parents:
        results = adopted_once_in_order(pg, parent, calls)
        assert all(e.payload["content"] == "Area summary: ok." for e in results)
        (run,) = pg.runs_of(parent)
        for receipt in pg.receipts(run.run_id):
            assert receipt.evidence["child_state"] == "completed"
            child_runs = pg.runs_of(receipt.evidence["child_session_id"])
            assert receipt.evidence["child_run_id"] == child_runs[-1].run_id


def test_b15_depth_two_tree_of_nine_sessions_on_one_slot(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    fleet.start_worker(concurrency=1, pool="prefork")
    mid = scripted(
        [{"text": "Delegating.", "tool_calls": [task("call_leaf")]}, {"text": "Mid done."}],
        ["Task"],
    )
    calls = [f"call_{i}" for i in range(1, 5)]
    spec = scripted_spec(
        [{"text": "Four parts.", "tool_calls": [task(c, "mid") for c in calls]}, {"text": "All."}],
        tools=["Task"],
        agents={"mid": mid, "leaf": bash_leaf("sleep 0.2; echo ok")},  # profiles are inherited
    )
    root = submit(fleet.dispatcher(pg), spec, make_repo(tmp_path / "repo"))
    seen, ids = _sample_until_done(pg, leases(fleet, redis_server), [root], timeout=90)
    assert len(ids) == 9
    assert all(terminal_state(pg, s) == "completed" for s in ids)
    assert seen.most_leases <= 1, "two sessions ran at once on one slot"
    assert seen.waiting_with_lease == []
    mids = [k.session_id for k in child_ledger(pg).children(root)]
    assert len(mids) == 4
    for sid in [root, *mids]:  # each recorded waiting (parked) at least once
        assert _parked_events(pg, sid) >= 1, sid
    adopted_once_in_order(pg, root, calls)
    for sid in mids:
        (result,) = adopted_once_in_order(pg, sid, ["call_leaf"])
        assert result.payload["content"] == "Leaf done."
