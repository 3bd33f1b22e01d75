"""Checks 12-15 of a mixed chaos run (``bench/chaos_control.py``): each catches its violation.

Two parents with children run on the memory ledger, one delivery at a time:
one parent is cancelled while it waits for its children (the cancel cascades),
one child of the other is cancelled while queued (its parent adopts the
cancelled result and completes).  The cancels go through ``Inbox.cancel``,
as the mixed run's do.  The clean history passes every check; a cancelled
session that completed anyway, a parent of a cancelled child left open, a
descendant of a cancelled parent left open, a fire recorded ``missed`` (or
too few fires) and a SIGTERMed worker that did not exit 0 are each caught.
"""

from __future__ import annotations

import copy
import functools
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.chaos_checks import Findings, LedgerDump
from bench.chaos_children import parent_spec
from bench.chaos_control import check_cancels, check_fires, check_sigterms, check_subtrees
from bench.chaos_mixed import Cancel, cancels_parent, mixed_plan
from bench.chaos_rig import Plan
from nahida_workers.core.events import SessionStatus, TerminalState
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.schedules.model import FireOutcome, FireRecord
from nahida_workers.testing import ListTaskQueue, memory_runner

CANCELS = "12 cancelled sessions sealed cancelled"
SUBTREES = "13 every parent of a cancelled subtree terminal"
FIRES = "14 no fire missed"
SIGTERMS = "15 SIGTERMed workers handed over and exited 0"


def _history() -> tuple[LedgerDump, list[Cancel], str, str]:
    """The dump (a copy each call), the two cancels, the cancelled parent and the other."""
    dump, cancels, cancelled, other = _run_history()
    return copy.deepcopy(dump), list(cancels), cancelled, other


@functools.cache
def _run_history() -> tuple[LedgerDump, list[Cancel], str, str]:
    runner = memory_runner()
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    inbox = Inbox(runner.ledger, runner.leases, dispatcher, runner.clock)
    cancelled, other = (
        dispatcher.submit(parent_spec(i), workspace="/tmp")[0].session_id for i in (2, 12)
    )
    for sid in (cancelled, other):  # each starts its children and parks
        queue.published.remove(next(p for p in queue.published if p[0] == sid))
        runner.run(sid)
    assert runner.ledger.get_session(cancelled).status is SessionStatus.WAITING  # type: ignore[union-attr]
    child = next(s.session_id for s in runner.ledger.sessions() if s.parent_id == other)
    cancels = []
    for sid, kind in ((cancelled, "parent"), (child, "child")):
        runner.clock.advance(1.0)
        before = runner.clock.now()
        inbox.cancel(sid)
        cancels.append(Cancel(sid, kind, before, runner.clock.now(), refused_done=False))
    # the cancelled parent's delivery first: it seals before its children ran
    queue.published.sort(key=lambda p: p[0] != cancelled)
    for _ in range(100):
        if not queue.published:
            break
        runner.clock.advance(0.5)
        sid, _ = queue.published.pop(0)
        runner.run(sid)
    return LedgerDump.read(runner.ledger), cancels, cancelled, other


def _violations(dump: LedgerDump, cancels: list[Cancel]) -> dict[str, list[str]]:
    found = Findings()
    check_cancels(dump, cancels, found)
    check_subtrees(dump, cancels, found)
    return found.violations


def _fire(second: int, outcome: FireOutcome) -> FireRecord:
    due = datetime(2026, 12, 1, 12, 0, second, tzinfo=UTC)
    return FireRecord(
        schedule_id="s",
        fire_time=due,
        due_at=due,
        outcome=outcome,
        decided_at=due + timedelta(milliseconds=40),
    )


def test_the_mixed_plan_cancels_half_the_parents_and_sizes_the_backlog() -> None:
    assert [cancels_parent(i) for i in (2, 12, 22, 32)] == [True, False, True, False]
    plan = Plan(20, 3, 4, 16.0, 2, 1, 6, 1, 100.0, sigterms=3)
    sizes = mixed_plan(plan)
    assert (sizes.backlog, sizes.cap, sizes.small, sizes.queued_cancels) == (40, 6, 5, 2)
    assert 0.3 <= sizes.turn_s <= 3.0
    assert plan.events.count("sigterm session worker") == 3
    assert plan.kinds[-1] == "sigterm session worker"


def test_a_clean_cancel_history_passes_checks_12_and_13() -> None:
    dump, cancels, cancelled, other = _history()
    found = Findings()
    latencies = check_cancels(dump, cancels, found)
    check_subtrees(dump, cancels, found)
    assert found.violations == {CANCELS: [], SUBTREES: []}
    assert len(latencies) == 2 and all(s >= 0 for s in latencies)
    assert dump.runs[cancelled][-1].terminal_state is TerminalState.CANCELLED
    assert dump.runs[other][-1].terminal_state is TerminalState.COMPLETED
    # the cancel cascaded: every child of the cancelled parent ended cancelled
    assert found.counts["descendants of cancelled parents, by last run"] == "cancelled 2"


def test_a_cancelled_session_that_completed_anyway_is_caught() -> None:
    dump, cancels, _cancelled, _other = _history()
    child = cancels[1].session_id
    # Completed after the cancel returned (the canceller now seals a queued session
    # inside the cancel call, so the recorded seal is moved past it).
    later = cancels[1].after + timedelta(seconds=1)
    dump.runs[child] = [
        r.model_copy(update={"terminal_state": TerminalState.COMPLETED, "ended_at": later})
        for r in dump.runs[child]
    ]
    assert any(child in v for v in _violations(dump, cancels)[CANCELS])
    # ... but a run that sealed before the cancel returned met it: not a violation
    early = [c if c.session_id != child else _late(c, dump) for c in cancels]
    assert _violations(dump, early)[CANCELS] == []


def _late(cancel: Cancel, dump: LedgerDump) -> Cancel:
    ended = dump.runs[cancel.session_id][-1].ended_at
    assert ended is not None
    return Cancel(cancel.session_id, cancel.kind, cancel.before, ended, refused_done=False)


def _reopen(dump: LedgerDump, session_id: str) -> None:
    dump.sessions = [
        s.model_copy(update={"status": SessionStatus.WAITING}) if s.session_id == session_id else s
        for s in dump.sessions
    ]


def test_an_open_parent_of_a_cancelled_child_is_caught() -> None:
    dump, cancels, _cancelled, other = _history()
    _reopen(dump, other)
    assert any(other in v for v in _violations(dump, cancels)[SUBTREES])


def test_an_open_descendant_of_a_cancelled_parent_is_caught() -> None:
    dump, cancels, cancelled, _other = _history()
    kid = next(s.session_id for s in dump.sessions if s.parent_id == cancelled)
    runs: list[Any] = dump.runs[kid]
    dump.runs[kid] = [runs[0].model_copy(update={"ended_at": None}), *runs[1:]]
    assert any(kid in v for v in _violations(dump, cancels)[SUBTREES])


def test_a_missed_fire_or_too_few_fires_is_caught() -> None:
    found = Findings()
    lags = check_fires([_fire(0, FireOutcome.DISPATCHED), _fire(3, FireOutcome.DISPATCHED)], found)
    assert found.violations[FIRES] == [] and lags == [0.04, 0.04]
    found = Findings()
    check_fires([_fire(0, FireOutcome.DISPATCHED), _fire(3, FireOutcome.MISSED)], found)
    assert any("missed" in v for v in found.violations[FIRES])
    found = Findings()
    check_fires([_fire(0, FireOutcome.DISPATCHED)], found)
    assert any("fewer than" in v for v in found.violations[FIRES])


def test_a_sigterm_that_did_not_end_in_a_clean_exit_is_caught() -> None:
    found = Findings()
    check_sigterms([("sessions1", 0, 2.5), ("sessions2", 0, 9.0)], found, expected=2)
    assert found.violations[SIGTERMS] == []
    found = Findings()
    check_sigterms([("sessions1", 1, 2.5), ("sessions2", None, 60.0)], found, expected=3)
    bad = found.violations[SIGTERMS]
    assert any("exited 1" in v for v in bad) and any("killed" in v for v in bad)
    assert any("2 exits recorded for 3" in v for v in bad)
