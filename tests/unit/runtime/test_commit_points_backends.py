"""DESIGN.md section 3 commit points, on every ledger backend.

``tests/unit/core/test_commit_points.py`` fails commits on the memory twin's
``commit_hook``.  Here the same two rules run on memory, SQLite, PostgreSQL
and PostgreSQL with the run hint (its one-statement commit path): the failure
is raised inside the real transaction, after the runtime's writes and before
the commit, so the database itself rolls them back.

(a) the turn commit (``assistant_output`` + ``tool_call``) fails -> no tool
    starts and nothing of the turn is stored;
(b) the results commit fails -> the run ends ``failed/tool_persistence_failed``
    with the call closed ``interrupted`` (outcome unknown); the tool ran once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec
from tests.unit.core.test_commit_points import MARKER, TURNS


def _fail_commits(ledger: Any, fail: Callable[[list[EventType]], bool]) -> list[list[EventType]]:
    """Make ``ledger``'s transactions fail inside, before commit, when ``fail(types)``.

    ``types`` are the event types the transaction appended.  Returns the list
    of every transaction's types (so a test proves it hit the commit it meant).
    """
    real_transaction, real_append = ledger.transaction, ledger.append
    written: dict[int, list[EventType]] = {}
    held: list[list[EventType]] = []

    def append(tx: Any, events: Sequence[Any], receipts: Sequence[Any] = ()) -> None:
        written.setdefault(id(tx), []).extend(e.type for e in events)
        real_append(tx, events, receipts)

    @contextmanager
    def transaction(**kwargs: Any) -> Iterator[Any]:
        with real_transaction(**kwargs) as tx:
            yield tx
            types = written.pop(id(tx), [])
            if types:
                held.append(types)
            if types and fail(types):
                raise LedgerUnavailableError("injected: the commit failed")

    ledger.transaction, ledger.append = transaction, append
    return held


def _start(ledger: Any, tmp_path: Path) -> tuple[SessionRunner, str, str]:
    clock = FakeClock()
    runner = memory_runner(ledger=ledger, clock=clock)
    spec = scripted_spec(TURNS, tools=["Bash"])
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(tmp_path))
    return runner, session.session_id, ledger.runs_of(session.session_id)[0].run_id


def test_a_failed_turn_commit_starts_no_tool_on_every_backend(ledger: Any, tmp_path: Path) -> None:
    runner, sid, run_id = _start(ledger, tmp_path)
    runner.ledger_outage_s = 0.3  # every retry of the turn commit fails too
    held = _fail_commits(ledger, lambda types: EventType.TOOL_CALL in types)
    with pytest.raises(LedgerUnavailableError):
        runner.run(sid)
    assert held and held[0] == [EventType.ASSISTANT_OUTPUT, EventType.TOOL_CALL], held
    assert not (tmp_path / MARKER).exists(), "a tool ran although its call was not committed"
    assert [e.type for e in ledger.events(run_id)] == [EventType.USER_INPUT]
    assert ledger.receipts(run_id) == []
    run = ledger.get_run(run_id)
    assert run is not None and run.terminal_state is None


def test_a_failed_results_commit_ends_tool_persistence_failed_on_every_backend(
    ledger: Any, tmp_path: Path
) -> None:
    runner, sid, run_id = _start(ledger, tmp_path)
    runner.ledger_outage_s = 0.3
    held = _fail_commits(ledger, lambda types: types == [EventType.TOOL_RESULT])
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert [EventType.TOOL_RESULT] in held, held
    assert (tmp_path / MARKER).read_text() == "x\n", "the tool must have run exactly once"
    events = ledger.events(run_id)
    assert [e.type for e in events] == [
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.TERMINAL,
    ]
    assert (events[-1].payload["state"], events[-1].payload["reason"]) == (
        "failed",
        "tool_persistence_failed",
    )
    assert (events[-2].payload["status"], events[-2].payload["synthetic"]) == ("interrupted", True)
    assert [(r.call_id, r.status.value) for r in ledger.receipts(run_id)] == [("c1", "interrupted")]
    assert runner.run(sid) is SessionOutcome.ALREADY_DONE
    assert (tmp_path / MARKER).read_text() == "x\n"
