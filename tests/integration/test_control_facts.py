"""Cancels and deadlines take effect without a worker slot (DESIGN.md section 8).

Real ``celery -A tasks worker`` (and ``beat``) processes on the real broker
and ledger:

* a queued child cancelled while every slot is busy is sealed by the
  canceller and its waiting parent is woken within 1 s (it used to wait for
  a free slot);
* a turn that answers after its session's cancel spawns its child born
  ``cancelled``: never published, no provider call, the Task call closed
  ``cancelled``;
* a parked parent's wall-clock budget, a durable timer fired by beat's
  sweep, ends it ``incomplete/budget_exhausted`` within one sweep interval
  while its child runs long -- and the child is cancelled.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.backlog import scripted_job
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_for
from tests.integration.children_world import all_done, bash_leaf, leases, task

pytestmark = pytest.mark.slow


def _status(pg: SqlLedger, session_id: str) -> SessionStatus | None:
    session = pg.get_session(session_id)
    return None if session is None else session.status


def _terminal(pg: SqlLedger, session_id: str) -> dict[str, object]:
    run = pg.runs_of(session_id)[-1]
    return dict(pg.events(run.run_id)[-1].payload)


def _outbox_rows(pg: SqlLedger, session_id: str) -> int:
    c = t.dispatch_outbox.c
    with pg.engine.connect() as conn:
        query = (
            select(func.count()).select_from(t.dispatch_outbox).where(c.session_id == session_id)
        )
        return int(conn.execute(query).scalar_one())


def test_a_queued_child_cancelled_while_every_slot_is_busy_wakes_its_parent_at_once(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    dispatcher = fleet.dispatcher(pg)
    spec = scripted_spec(
        [{"text": "One area.", "tool_calls": [task("call_a")]}, {"text": "Adopted."}],
        tools=["Task"],
        agents={"leaf": bash_leaf("echo never")},
    )
    parent = submit(dispatcher, spec, repo)  # queued first: it runs, spawns, parks
    blocker = scripted_job("blocker", delay_s=8.0).session_spec()
    blockers = [submit(dispatcher, blocker, repo) for _ in range(2)]  # then both slots
    fleet.start_worker(concurrency=2, pool="threads")
    wait_for(lambda: _status(pg, parent) is SessionStatus.WAITING, timeout=30, what="the park")
    (run,) = pg.runs_of(parent)
    kid = child_id(run.run_id, "call_a")
    wait_for(
        lambda: all(_status(pg, b) is SessionStatus.RUNNING for b in blockers),
        timeout=30,
        what="every slot busy",
    )
    assert _status(pg, kid) is SessionStatus.QUEUED  # behind the busy slots

    inbox = Inbox(pg, leases(fleet, redis_server), dispatcher, SystemClock())
    asked = time.monotonic()
    report = inbox.cancel(kid)
    wait_for(lambda: _status(pg, parent) is not SessionStatus.WAITING, timeout=5,
             what="the parent to be woken", every=0.01)  # fmt: skip
    woken_s = time.monotonic() - asked
    print(f"queued child cancelled with every slot busy: parent woken in {woken_s * 1000:.0f} ms")
    assert report.sealed == (kid,) and report.woke == (parent,)
    assert woken_s < 1.0
    assert all(_status(pg, b) is SessionStatus.RUNNING for b in blockers)  # no slot was freed
    end = _terminal(pg, kid)
    assert (end["state"], end["decided_by"]) == ("cancelled", "cancel")
    kid_events = pg.events(pg.runs_of(kid)[-1].run_id)
    assert not [e for e in kid_events if e.type is EventType.ASSISTANT_OUTPUT]  # never ran
    # Once a slot frees, the parent adopts the cancelled child and finishes.
    wait_for(lambda: all_done(pg, [parent, *blockers]), timeout=60, what="the parent to finish")
    (result,) = [e for e in pg.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert result.call_id == "call_a" and "cancelled" in str(result.payload["content"])
    assert _terminal(pg, parent)["state"] == "completed"


def test_a_turn_answering_after_the_cancel_spawns_a_child_never_published(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, redis_server: str
) -> None:
    fleet.start_worker(concurrency=2, pool="threads")
    repo = make_repo(tmp_path / "repo")
    marker = repo / "child-ran.txt"
    spec = scripted_spec(
        [
            {"text": "Slow answer.", "delay_s": 3.0, "tool_calls": [task("call_a")]},
            {"text": "Never."},
        ],
        tools=["Task"],
        agents={"leaf": bash_leaf(f"echo ran >> {marker}")},
    )
    dispatcher = fleet.dispatcher(pg)
    parent = submit(dispatcher, spec, repo)
    store = leases(fleet, redis_server)
    wait_for(
        lambda: _status(pg, parent) is SessionStatus.RUNNING and store.holder(parent),
        timeout=30,
        what="the parent's provider call",
        every=0.01,
    )
    report = Inbox(pg, store, dispatcher, SystemClock()).cancel(parent)
    assert report.flagged == (parent,)  # its owner holds it: the turn still answers
    wait_for(lambda: all_done(pg, [parent]), timeout=30, what="the parent to end")
    (run,) = pg.runs_of(parent)
    kid = child_id(run.run_id, "call_a")
    assert _terminal(pg, parent)["state"] == "cancelled"
    assert _status(pg, kid) is SessionStatus.DONE
    end = _terminal(pg, kid)
    assert (end["state"], end["decided_by"]) == ("cancelled", "spawn")
    assert _outbox_rows(pg, kid) == 0  # never published
    kid_events = [e.type.value for e in pg.events(pg.runs_of(kid)[-1].run_id)]
    assert kid_events == ["user_input", "terminal"]  # no provider call, no tool
    (result,) = [e for e in pg.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert (result.call_id, result.payload["status"]) == ("call_a", "cancelled")
    time.sleep(1.0)  # a stray delivery would have run the child's Bash by now
    assert not marker.exists()


def test_a_parked_parents_budget_fires_from_beat_while_its_child_runs_long(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    budget_s, sweep_s = 4.0, 1.0
    fleet.extra_env.update({"NAHIDA_SWEEPER_INTERVAL_S": str(sweep_s)})
    fleet.start_worker(concurrency=2, pool="threads")
    fleet.start_beat(name="beat")
    repo = make_repo(tmp_path / "repo")
    spec = scripted_spec(
        [{"text": "Wait for it.", "tool_calls": [task("call_a")]}, {"text": "Never."}],
        tools=["Task"],
        agents={"leaf": bash_leaf("sleep 60")},  # its own budget: the default hour
        limits={"wall_clock_budget_s": budget_s},
    )
    parent = submit(fleet.dispatcher(pg), spec, repo)
    wait_for(lambda: _status(pg, parent) is SessionStatus.WAITING, timeout=30, what="the park")
    (run,) = pg.runs_of(parent)
    kid = child_id(run.run_id, "call_a")
    wait_for(lambda: all_done(pg, [parent]), timeout=budget_s + 15, what="the budget to fire")
    sealed = pg.get_run(run.run_id)
    assert sealed is not None and sealed.ended_at is not None
    took_s = (sealed.ended_at - run.started_at).total_seconds()
    print(
        f"parked parent with a {budget_s:g}s budget ended after {took_s:.2f}s (sweep {sweep_s:g}s)"
    )
    end = _terminal(pg, parent)
    assert (end["state"], end["reason"], end["decided_by"]) == (
        "incomplete",
        "budget_exhausted",
        "timer:budget",
    )
    assert budget_s <= took_s <= budget_s + sweep_s + 1.5  # within one sweep interval
    # Its foreground child (running, owned) is cancelled at its owner's next poll.
    wait_for(lambda: all_done(pg, [kid]), timeout=15, what="the child to be cancelled")
    assert _terminal(pg, kid)["state"] == "cancelled"
