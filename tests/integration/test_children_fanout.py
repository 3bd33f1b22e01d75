"""Subagent fan-out on a real worker with ONE session slot (issue 13 part A, case B15).

A parent with four foreground children must complete on a fleet whose only
session-worker slot is never held by a waiting parent: the parent parks
(status ``waiting``, lease released), each child runs in that slot, and each
child's completion re-dispatches the parent, which adopts the results in
call order.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import LEASE_DB, Fleet, make_repo, submit, wait_for

pytestmark = pytest.mark.slow

CALLS = ["call_1", "call_2", "call_3", "call_4"]


def _task(call_id: str) -> dict[str, Any]:
    args = {"description": f"area {call_id}", "prompt": f"Summarise {call_id}.", "agent": "leaf"}
    return {"id": call_id, "name": "Task", "arguments": args}


LEAF = {
    "tools": ["Bash"],
    "provider": {
        "kind": "scripted",
        "script": {
            "turns": [
                {
                    "text": "Working.",
                    "tool_calls": [
                        {
                            "id": "work",
                            "name": "Bash",
                            "arguments": {"command": "sleep 0.5; echo ok"},
                        }
                    ],
                },
                {"text": "Area summary: ok."},
            ]
        },
    },
}


def test_four_foreground_children_complete_on_one_slot(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    fleet.start_worker(concurrency=1, pool="threads")
    spec = scripted_spec(
        [
            {"text": "Splitting the work by area.", "tool_calls": [_task(c) for c in CALLS]},
            {"text": "All four areas are summarised."},
        ],
        tools=["Task"],
        agents={"leaf": LEAF},
    )
    parent = submit(fleet.dispatcher(pg), spec, repo)
    leases = RedisLeaseStore.from_url(f"{redis_server}/{LEASE_DB}", key_prefix=fleet.prefix)
    seen_waiting_with_running_child = False
    parent_lease_while_waiting: list[str | None] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        session = pg.get_session(parent)
        assert session is not None
        if session.status is SessionStatus.DONE:
            break
        kids = child_ledger(pg).children(parent)
        if session.status is SessionStatus.WAITING and any(
            k.status is not SessionStatus.DONE for k in kids
        ):
            seen_waiting_with_running_child = True
            parent_lease_while_waiting.append(leases.holder(parent))
        time.sleep(0.05)
    wait_for(
        lambda: (s := pg.get_session(parent)) is not None and s.status is SessionStatus.DONE,
        timeout=5,
        what="the parent to finish",
    )
    run = pg.runs_of(parent)[-1]
    events = pg.events(run.run_id)
    assert events[-1].type is EventType.TERMINAL and events[-1].payload["state"] == "completed"
    assert seen_waiting_with_running_child  # the ledger showed the parent waiting
    free = sum(h is None for h in parent_lease_while_waiting)  # released right after the park
    assert free >= len(parent_lease_while_waiting) / 2, parent_lease_while_waiting
    kids = child_ledger(pg).children(parent)
    assert sorted(k.session_id for k in kids) == sorted(child_id(run.run_id, c) for c in CALLS)
    assert all(k.status is SessionStatus.DONE for k in kids)
    results = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == CALLS  # adopted once each, in call order
    assert all(e.payload["content"] == "Area summary: ok." for e in results)
    receipts = {r.call_id: r for r in pg.receipts(run.run_id)}
    for call in CALLS:
        evidence = receipts[call].evidence
        assert evidence["child_session_id"] == child_id(run.run_id, call)
        assert evidence["child_state"] == "completed"
        assert evidence["child_run_id"] == pg.runs_of(evidence["child_session_id"])[-1].run_id
