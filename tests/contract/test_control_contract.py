"""The control-fact port (``ports.ControlLedger``) on every ledger adapter (DESIGN.md section 8).

Fences taken by the canceller and beat (``fence_unowned``), the conditional
cancel flag, the spawn's chain read, and durable timers (migration 0012):
armed, re-armed, fired once by compare-and-set.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.facts import Timer, budget_timer
from nahida_workers.errors import LedgerIntegrityError, NotFoundError, StaleEpochError
from nahida_workers.ledger.control import control_ledger
from nahida_workers.ledger.sql import SqlLedger
from tests.contract.ledger_world import T0, at, make_world, user_input


def _status(w: Any, status: SessionStatus) -> None:
    with w.ledger.transaction() as tx:
        w.ledger.set_session_status(tx, w.session_id, status, at=at(1))


def test_a_queued_session_no_one_holds_is_fenced_and_its_old_owner_refused(ledger: Any) -> None:
    w = make_world(ledger)
    control = control_ledger(ledger)
    with ledger.transaction() as tx:
        fence = control.fence_unowned(tx, w.session_id, lease_free=True, at=at(2))
        assert fence is not None and fence.epoch == 1
        ledger.append(tx, [user_input(w.run_id, 2, "written under the canceller's fence")])
    assert ledger.get_session(w.session_id).lease_epoch == 1
    assert ledger.events(w.run_id)[-1].epoch == 1
    with pytest.raises(StaleEpochError):  # the epoch-0 writer is fenced out
        w.append(user_input(w.run_id, 3))


def test_an_owned_or_done_session_is_not_fenced(ledger: Any) -> None:
    w = make_world(ledger)
    control = control_ledger(ledger)
    with ledger.transaction() as tx:  # lease held: an owner may be taking it
        assert control.fence_unowned(tx, w.session_id, lease_free=False, at=at(2)) is None
    w.bump()  # an owner took it and never handed it back (open_epoch set)
    with ledger.transaction() as tx:
        assert control.fence_unowned(tx, w.session_id, lease_free=True, at=at(2)) is None
    _status(w, SessionStatus.DONE)
    with ledger.transaction() as tx:
        assert control.fence_unowned(tx, w.session_id, lease_free=True, at=at(2)) is None
    assert ledger.get_session(w.session_id).lease_epoch == w.epoch  # nothing written
    with ledger.transaction() as tx, pytest.raises(NotFoundError):
        control.fence_unowned(tx, "nope", lease_free=True, at=at(2))


def test_a_waiting_session_is_fenced_even_while_its_old_owner_releases(ledger: Any) -> None:
    w = make_world(ledger)
    w.bump()
    _status(w, SessionStatus.WAITING)  # parked: its owner writes nothing more
    with ledger.transaction() as tx:
        fence = control_ledger(ledger).fence_unowned(tx, w.session_id, lease_free=False, at=at(2))
    assert fence is not None and fence.epoch == w.epoch + 1


def test_the_cancel_flag_is_never_set_on_a_done_session(ledger: Any) -> None:
    w = make_world(ledger)
    control = control_ledger(ledger)
    with ledger.transaction() as tx:
        assert control.flag_cancel(tx, w.session_id, at=at(1))
        assert control.cancel_flags(tx, [w.session_id, "nope"]) == {w.session_id: (True, True)}
    other = make_world(ledger, "s-2", "r-2")
    _status(other, SessionStatus.DONE)
    with ledger.transaction() as tx:
        assert not control.flag_cancel(tx, "s-2", at=at(1))
    assert ledger.get_session("s-2").cancel_requested_at is None


def _timer(session_id: str, run_id: str, budget_s: float = 10.0) -> Timer:
    return budget_timer(session_id, session_id, run_id, started_at=T0, budget_s=budget_s, now=at(1))


def test_timers_are_armed_due_and_fired_once(ledger: Any) -> None:
    w = make_world(ledger)
    control = control_ledger(ledger)
    timer = _timer(w.session_id, w.run_id)
    with ledger.transaction() as tx:
        control.set_timer(tx, timer)
    assert control.due_timers(now=at(9)) == []
    (due,) = control.due_timers(now=at(10))
    assert (due.timer_id, due.kind, due.due_at, due.payload["run_id"]) == (
        timer.timer_id,
        "budget",
        T0 + timedelta(seconds=10),
        w.run_id,
    )
    with ledger.transaction() as tx:
        assert control.fire_timer(tx, timer.timer_id, outcome="sealed", at=at(11))
    with ledger.transaction() as tx:  # the second firing finds it fired
        assert not control.fire_timer(tx, timer.timer_id, outcome="sealed", at=at(12))
    assert control.due_timers(now=at(100)) == []
    (fired,) = control.timers(w.session_id)
    assert (fired.fired_at, fired.outcome) == (at(11), "sealed")
    # A re-park arms the same row again (due, payload, not fired).
    with ledger.transaction() as tx:
        control.set_timer(tx, _timer(w.session_id, w.run_id, budget_s=20))
    (again,) = control.timers(w.session_id)
    assert again.fired_at is None and again.due_at == T0 + timedelta(seconds=20)


def test_a_timer_rolled_back_with_its_transaction_stays_armed(ledger: Any) -> None:
    w = make_world(ledger)
    control = control_ledger(ledger)
    timer = _timer(w.session_id, w.run_id)
    with ledger.transaction() as tx:
        control.set_timer(tx, timer)
    with pytest.raises(RuntimeError), ledger.transaction() as tx:
        assert control.fire_timer(tx, timer.timer_id, outcome="sealed", at=at(11))
        raise RuntimeError("the firing's seal failed")
    assert [t.timer_id for t in control.due_timers(now=at(11))] == [timer.timer_id]
    with pytest.raises(LedgerIntegrityError), ledger.transaction() as tx:
        control.set_timer(tx, _timer("nope", "r-x"))


def test_two_beats_fire_one_timer_once(postgres_ledger: SqlLedger) -> None:
    """Two firings race on PostgreSQL: the second waits for the row lock, then loses."""
    w = make_world(postgres_ledger)
    control = control_ledger(postgres_ledger)
    timer = _timer(w.session_id, w.run_id)
    with postgres_ledger.transaction() as tx:
        control.set_timer(tx, timer)
    barrier = threading.Barrier(2)
    won: list[bool] = []

    def fire() -> None:
        with postgres_ledger.transaction() as tx:
            barrier.wait(timeout=10)
            won.append(control.fire_timer(tx, timer.timer_id, outcome="sealed", at=at(11)))

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(won) == [False, True]
