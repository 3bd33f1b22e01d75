"""Cancels and deadlines as ledger facts, on every ledger backend (DESIGN.md section 8).

One memory fleet with one slot (``test_children.py``'s :class:`World`) over
memory, SQLite and PostgreSQL ledgers, a fake clock, and the control-plane
pieces beat and the canceller run: :class:`Canceller` and :class:`TimerFirer`.

* a parked parent's wall-clock budget is a timer written at park; the
  sweep's firing seals it ``incomplete/budget_exhausted`` and cancels its
  foreground children -- no delivery runs; a second firing does nothing;
* a timer of a session a worker holds is left to its owner (``owned``);
* a turn that answers after its session's cancel spawns its child born
  ``cancelled``: never published, no provider call, the Task call closed
  ``cancelled``;
* an ancestor's cancel reaches a grandchild's spawn the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.core.facts import TimerKind
from nahida_workers.ledger.control import control_ledger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.control.cancel import Canceller
from nahida_workers.runtime.control.timers import TimerFirer
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.testing.doubles import memory_runner
from tests.unit.runtime.test_children import AGENTS, World, profile, task
from tests.unit.runtime.test_children_background import RUN, submit, terminal


@pytest.fixture
def w(ledger: Any) -> World:
    """A one-slot fleet over every ledger backend (memory, SQLite, PostgreSQL)."""
    return World(memory_runner(ledger=ledger))


def _firer(w: World) -> TimerFirer:
    r = w.runner
    return TimerFirer(Canceller(r.ledger, r.leases, w.dispatcher, r.clock, r.inbox_limits))


def _parked_parent(w: World, budget_s: float) -> str:
    agents = {**AGENTS, "slow": profile({"text": "Slow."})}
    turns = [{"text": "go", "tool_calls": [task("call_a", "slow")]}, {"text": "x"}]
    parent = submit(w, turns, agents=agents, limits={"wall_clock_budget_s": budget_s})
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    return parent


def test_a_parked_parents_budget_ends_it_from_the_sweep_with_no_delivery(w: World) -> None:
    parent = _parked_parent(w, budget_s=10)
    ledger, kid = w.runner.ledger, child_id(RUN, "call_a")
    (timer,) = control_ledger(ledger).timers(parent)  # written in the park's transaction
    assert timer.kind == TimerKind.BUDGET.value and timer.payload["run_id"] == RUN
    assert _firer(w).fire_due() == []  # not due yet
    w.runner.clock.advance(10.5)  # type: ignore[attr-defined]
    published = len(w.queue.published)
    assert _firer(w).fire_due() == [(timer.timer_id, "sealed")]
    end = terminal(ledger, parent)
    assert (end["state"], end["reason"], end["decided_by"]) == (
        "incomplete",
        "budget_exhausted",
        "timer:budget",
    )
    # Its foreground child, still queued behind the busy slot, is cancelled with it.
    assert terminal(ledger, kid)["state"] == "cancelled"
    results = [e for e in ledger.events(RUN) if e.type is EventType.TOOL_RESULT]
    assert [(e.call_id, e.payload["status"]) for e in results] == [("call_a", "interrupted")]
    assert len(w.queue.published) == published  # no worker slot was needed
    # Idempotent: the timer is fired; a second beat holding the same row loses.
    assert _firer(w).fire_due() == []
    assert _firer(w).fire(timer) is None
    (fired,) = control_ledger(ledger).timers(parent)
    assert fired.outcome == "sealed"
    w.pump()  # the child's queued delivery finds it done
    assert ledger.runs_of(kid)[-1].terminal_state.value == "cancelled"  # type: ignore[union-attr]


def test_a_timer_of_a_session_a_worker_holds_is_left_to_its_owner(w: World) -> None:
    parent = _parked_parent(w, budget_s=10)
    ledger = w.runner.ledger
    w.runner.clock.advance(11)  # type: ignore[attr-defined]
    assert w.runner.leases.acquire(parent, "a-live-owner", 60_000)
    bumped = ledger.bump_epoch(parent, at=w.runner.clock.now())
    assert bumped > 0
    ((_tid, outcome),) = _firer(w).fire_due()
    assert outcome == "owned"
    assert ledger.get_session(parent).status is SessionStatus.RUNNING  # untouched


def test_a_turn_answering_after_the_cancel_spawns_a_child_born_cancelled(w: World) -> None:
    """The cancel lands while the provider call is in flight (the owner holds the lease)."""
    ledger = w.runner.ledger
    inbox = Inbox(ledger, w.runner.leases, w.dispatcher, w.runner.clock)
    calls: list[str] = []
    provider_for = w.runner.provider_for

    def cancelling_provider(spec: Any) -> Any:
        provider = provider_for(spec)
        complete = provider.complete

        def answer(request: Any, **kw: Any) -> Any:
            calls.append(request.run_id)
            if request.run_id == RUN:
                report = inbox.cancel(parent)
                assert report.flagged == (parent,)  # the owner holds it: flagged
            return complete(request, **kw)

        provider.complete = answer
        return provider

    w.runner.provider_for = cancelling_provider
    parent = submit(w, [{"text": "go", "tool_calls": [task("call_a", "alpha")]}, {"text": "x"}])
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.FINISHED
    kid = child_id(RUN, "call_a")
    assert terminal(ledger, parent)["state"] == "cancelled"
    child = ledger.get_session(kid)
    assert child is not None and child.status is SessionStatus.DONE
    end = terminal(ledger, kid)
    assert (end["state"], end["decided_by"]) == ("cancelled", "spawn")
    assert kid not in {sid for sid, _ in w.queue.published}  # never published
    assert not [o for o in ledger.pending_outbox() if o.session_id == kid]
    w.pump()
    assert calls == [RUN]  # the child never called its provider
    (result,) = [e for e in ledger.events(RUN) if e.type is EventType.TOOL_RESULT]
    assert (result.call_id, result.payload["status"]) == ("call_a", "cancelled")
    kid_events = [e.type.value for e in ledger.events(ledger.runs_of(kid)[-1].run_id)]
    assert kid_events == ["user_input", "terminal"]


def test_an_ancestors_cancel_reaches_a_grandchilds_spawn(w: World) -> None:
    """Only the root is flagged (the window before a cascade): the spawn reads the chain."""
    ledger = w.runner.ledger
    agents = {
        **AGENTS,
        "leaf": profile({"text": "Leaf."}),
        "mid": {
            "tools": ["Task"],
            "provider": {
                "kind": "scripted",
                "script": {
                    "turns": [{"text": "go", "tool_calls": [task("m1", "leaf")]}, {"text": "y"}]
                },
            },
        },
    }
    turns = [{"text": "go", "tool_calls": [task("call_m", "mid")]}, {"text": "x"}]
    root = submit(w, turns, agents=agents)
    assert w.runner.run(w.queue.published.pop(0)[0]) is SessionOutcome.PARKED
    mid = child_id(RUN, "call_m")
    with ledger.transaction() as tx:  # the root's flag alone, as an owner-path cancel leaves it
        ledger.request_cancel(tx, root, at=w.runner.clock.now())
    assert w.runner.run(w.queue.published.pop(0)[0]) is SessionOutcome.FINISHED
    (mid_run,) = ledger.runs_of(mid)
    leaf = child_id(mid_run.run_id, "m1")
    assert terminal(ledger, leaf)["decided_by"] == "spawn"
    assert terminal(ledger, mid)["state"] == "cancelled"  # flagged by its own spawn


def test_a_session_deferred_by_its_cap_and_one_waiting_out_a_retry_are_sealed_at_once(
    w: World,
) -> None:
    from nahida_workers.ledger.admission import admission_ledger
    from nahida_workers.testing.doubles import scripted_spec

    ledger, now = w.runner.ledger, w.runner.clock.now()
    w.dispatcher.set_cap("g", 1)
    spec = scripted_spec([{"text": "Done."}])
    running, deferred = (
        w.dispatcher.submit(spec, workspace="/tmp", admission_group="g")[0].session_id
        for _ in range(2)
    )
    admission = admission_ledger(ledger)
    assert admission.admit(running, at=now) and not admission.admit(deferred, at=now)
    # ``running``: admitted, then its owner handed it back (a retry's countdown).
    epoch = ledger.bump_epoch(running, at=now)
    ledger.close_owner(running, epoch, at=now)
    inbox = Inbox(ledger, w.runner.leases, w.dispatcher, w.runner.clock)
    assert inbox.cancel(deferred).sealed == (deferred,)
    assert admission.release("g", at=now, new_id=lambda: "x") == []  # a done one is never picked
    assert inbox.cancel(running).sealed == (running,)
    assert admission.running("g") == 0  # its slot is free
    for sid in (running, deferred):
        assert terminal(ledger, sid)["state"] == "cancelled"
        assert w.runner.run(sid) is SessionOutcome.ALREADY_DONE
