"""Checks 8-11 of the chaos run (``bench/chaos_children.py``): each catches its violation.

A parent with three foreground children runs to its end on the memory
ledger, one delivery at a time (one slot); the clean history passes every
check, and a doubled child, a parent left waiting, a result adopted twice
and a non-terminal child of a completed parent are each caught.
"""

from __future__ import annotations

from typing import Any

from bench.chaos_checks import Findings, LedgerDump
from bench.chaos_children import check_children, children_of_parent, is_parent, parent_spec
from bench.chaos_hostile import is_hostile
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import ListTaskQueue, memory_runner

CHECKS = [
    "8 children per (parent run, call) <= 1",
    "9 no parent left waiting",
    "10 one tool_result per Task call",
    "11 children of a completed parent are terminal",
]


def _history() -> tuple[LedgerDump, Any, str]:
    runner = memory_runner()
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)
    runner.publish = dispatcher.publish
    session, _ = dispatcher.submit(parent_spec(12), workspace="/tmp")
    for _ in range(50):
        if not queue.published:
            break
        sid, _ = queue.published.pop(0)
        runner.run(sid)
    return LedgerDump.read(runner.ledger), runner.ledger, session.session_id


def _found(dump: LedgerDump, ledger: Any) -> dict[str, list[str]]:
    found = Findings()
    check_children(dump, ledger, found)
    return found.violations


def test_parents_are_one_in_ten_never_hostile_with_two_or_three_children() -> None:
    parents = [i for i in range(100) if is_parent(i)]
    assert len(parents) == 10 and not any(is_hostile(i) for i in parents)
    assert {children_of_parent(i) for i in parents} == {2, 3}


def test_a_clean_parent_history_passes_checks_8_to_11() -> None:
    dump, ledger, _parent = _history()
    violations = _found(dump, ledger)
    assert {k: violations[k] for k in CHECKS} == {k: [] for k in CHECKS}
    found = Findings()
    check_children(dump, ledger, found)
    assert found.counts["child sessions"] == 3
    assert dump.sessions[0].status is SessionStatus.DONE


def test_each_violation_is_caught() -> None:
    dump, ledger, parent = _history()
    run_id = dump.runs[parent][-1].run_id
    events = dump.events[run_id]
    result = next(e for e in events if e.type is EventType.TOOL_RESULT)
    dump.events[run_id] = [*events[:-1], result.model_copy(update={"sequence": 99}), events[-1]]
    assert _found(dump, ledger)["10 one tool_result per Task call"]

    dump, ledger, parent = _history()
    kids = [s for s in dump.sessions if s.parent_id == parent]
    dump.sessions = [
        s.model_copy(update={"status": SessionStatus.WAITING}) if s.session_id == parent else s
        for s in dump.sessions
    ]
    assert _found(dump, ledger)["9 no parent left waiting"]

    dump, ledger, parent = _history()
    kids = [s for s in dump.sessions if s.parent_id == parent]
    dump.sessions = [
        s.model_copy(update={"status": SessionStatus.RUNNING})
        if s.session_id == kids[0].session_id
        else s
        for s in dump.sessions
    ]
    assert _found(dump, ledger)["11 children of a completed parent are terminal"]

    dump, ledger, parent = _history()
    kids = [s for s in dump.sessions if s.parent_id == parent]
    extra = kids[0].model_copy(update={"session_id": "f" * 32})
    dump.sessions.append(extra)
    dump.runs[extra.session_id] = []
    assert _found(dump, ledger)["8 children per (parent run, call) <= 1"]
