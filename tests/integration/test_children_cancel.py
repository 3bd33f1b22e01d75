"""Cancel and limits of child sessions on a real worker (issue 13 item 5, DESIGN.md section 8).

* Cancelling a waiting parent re-dispatches it; its seal cancels the
  children still running (``parent_close: cancel``, the default), and each
  child's running Bash call is stopped at its next cancel poll.
* A Task call beyond a child limit (here ``NAHIDA_CHILD_MAX_PER_SESSION=1``)
  gets an error result naming the limit; the parent carries on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_for
from tests.integration.children_world import (
    all_done,
    bash_leaf,
    leases,
    lines,
    task,
    terminal_state,
)

pytestmark = pytest.mark.slow

CALLS = ["call_a", "call_b"]


def test_cancelling_a_waiting_parent_cancels_its_running_children(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    fleet.start_worker(concurrency=3, pool="threads")
    repo = make_repo(tmp_path / "repo")
    marker = repo / "started.txt"  # the children share the workspace: Bash writes nowhere else
    spec = scripted_spec(
        [{"text": "Two slow areas.", "tool_calls": [task(c) for c in CALLS]}, {"text": "Never."}],
        tools=["Task"],
        agents={"leaf": bash_leaf(f"echo $NAHIDA_SESSION_ID >> {marker}; sleep 30")},
    )
    dispatcher = fleet.dispatcher(pg)
    parent = submit(dispatcher, spec, repo)
    wait_for(lambda: len(lines(marker)) == 2, timeout=30, what="both children's Bash to start")
    wait_for(
        lambda: pg.get_session(parent).status.value == "waiting",  # type: ignore[union-attr]
        timeout=10,
        what="the parent to park",
    )
    (run,) = pg.runs_of(parent)
    kids = [child_id(run.run_id, c) for c in CALLS]
    Inbox(pg, leases(fleet, redis_server), dispatcher, SystemClock()).cancel(parent)
    wait_for(lambda: all_done(pg, [parent, *kids]), timeout=20, what="parent and children to end")
    assert terminal_state(pg, parent) == "cancelled"
    assert [terminal_state(pg, k) for k in kids] == ["cancelled", "cancelled"]
    for kid in kids:
        (kid_run,) = pg.runs_of(kid)
        (receipt,) = pg.receipts(kid_run.run_id)
        assert receipt.status.value in {"cancelled", "interrupted"}  # the sleep was stopped


def test_a_task_call_beyond_the_child_limit_gets_an_error_result(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(postgres_url, redis_server, logs, extra_env={"NAHIDA_CHILD_MAX_PER_SESSION": "1"})
    try:
        fleet.start_worker(concurrency=2, pool="threads")
        spec = scripted_spec(
            [{"text": "Two areas.", "tool_calls": [task(c) for c in CALLS]}, {"text": "One."}],
            tools=["Task"],
            agents={"leaf": bash_leaf("echo ok")},
        )
        parent = submit(fleet.dispatcher(pg), spec, make_repo(tmp_path / "repo"))
        wait_for(lambda: all_done(pg, [parent]), timeout=30, what="the parent to finish")
        (run,) = pg.runs_of(parent)
        assert terminal_state(pg, parent) == "completed"
        results = {
            e.call_id: e.payload
            for e in pg.events(run.run_id)
            if e.call_id and e.type.value == "tool_result"
        }
        assert results["call_a"]["status"] == "ok"
        assert results["call_b"]["status"] == "error"
        assert "maximum of 1 children" in results["call_b"]["content"]
        assert pg.get_session(child_id(run.run_id, "call_b")) is None  # no child was made
        receipt = {r.call_id: r for r in pg.receipts(run.run_id)}["call_b"]
        assert receipt.evidence["error_code"] == "task_refused"
    finally:
        fleet.stop()
