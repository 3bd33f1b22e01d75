"""The commit points of DESIGN.md section 3, with a ledger whose commit fails on cue.

(a) If the transaction that commits a provider turn fails, no tool starts and
    nothing of that turn is in the ledger.
(b) If the transaction that commits tool results fails for longer than the
    owner rides out an outage, the run ends ``failed/tool_persistence_failed``
    -- the side effect happened once and is never repeated.
(c) A shorter outage is ridden out (``runtime/commits/outage.py``): the commit is
    retried, and an attempt whose acknowledgement was lost after it landed is
    found in the ledger and not applied twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, FailureCode, SessionStatus
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec

MARKER = "ran.marker"
TURNS = [
    {
        "text": "Touching the marker.",
        "tool_calls": [
            {"id": "c1", "name": "Bash", "arguments": {"command": f"echo x >> {MARKER}"}}
        ],
    },
    {"text": "Done."},
]


@dataclass
class FailAt:
    """``commit_hook`` that fails the transactions ``fail`` picks.

    ``fail(n, types)`` gets the 1-based number of the transaction and the
    event types it was about to commit.  The hook records those types for
    every transaction, so a test can prove it failed the commit point it
    meant to.
    """

    ledger: MemoryLedger
    run_id: str
    fail: Callable[[int, list[EventType]], bool]
    count: int = 0
    committed_len: int = 0
    held: list[list[EventType]] = field(default_factory=list)

    def __call__(self) -> None:
        self.count += 1
        pending = self.ledger.events(self.run_id)[self.committed_len :]
        types = [e.type for e in pending]
        self.held.append(types)
        if self.fail(self.count, types):
            raise LedgerUnavailableError(f"injected failure of transaction {self.count}")
        self.committed_len += len(pending)


def start(
    tmp_path: Path, fail: Callable[[int, list[EventType]], bool], *, outage_s: float = 0.0
) -> tuple[SessionRunner, MemoryLedger, str, str, FailAt]:
    clock = FakeClock()
    ledger = MemoryLedger()
    runner = memory_runner(ledger=ledger, clock=clock)
    runner.ledger_outage_s = outage_s
    spec = scripted_spec(TURNS, tools=["Bash"])
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(tmp_path))
    run_id = ledger.runs_of(session.session_id)[0].run_id
    hook = FailAt(ledger, run_id, fail, committed_len=len(ledger.events(run_id)))
    ledger.commit_hook = hook
    return runner, ledger, session.session_id, run_id, hook


def results_commit(_n: int, types: list[EventType]) -> bool:
    return types == [EventType.TOOL_RESULT]


def completed_once(ledger: MemoryLedger, run_id: str, tmp_path: Path) -> None:
    """The run completed with one call, one result, one receipt; the tool ran once."""
    assert (tmp_path / MARKER).read_text() == "x\n", "the tool must have run exactly once"
    types = [e.type for e in ledger.events(run_id)]
    assert types == [
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TERMINAL,
    ], types
    assert len(ledger.receipts(run_id)) == 1
    run = ledger.get_run(run_id)
    assert run is not None and run.terminal_state is not None
    assert run.terminal_state.value == "completed"


def test_a_failed_turn_commit_starts_no_tool_and_leaves_nothing(tmp_path: Path) -> None:
    # transactions of runner.run: 1 bump_epoch, 2 the provider turn, ...
    # and every retry of the turn fails too (the outage outlasts 0.3 s)
    runner, ledger, sid, run_id, hook = start(tmp_path, lambda n, _t: n >= 2, outage_s=0.3)
    with pytest.raises(LedgerUnavailableError):
        runner.run(sid)
    assert hook.held[1] == [EventType.ASSISTANT_OUTPUT, EventType.TOOL_CALL], hook.held
    assert not (tmp_path / MARKER).exists(), "a tool ran although its call was not committed"
    assert [e.type for e in ledger.events(run_id)] == [EventType.USER_INPUT]
    assert ledger.receipts(run_id) == []
    run = ledger.get_run(run_id)
    assert run is not None and run.terminal_state is None  # the run stays open for a retry
    assert runner.leases.holder(sid) is None  # and the lease was given back


def test_a_failed_result_commit_ends_the_run_tool_persistence_failed(tmp_path: Path) -> None:
    # 1 bump_epoch, 2 the provider turn, 3.. the tool results (every attempt
    # fails for 0.3 s), then the terminal commit
    runner, ledger, sid, run_id, hook = start(tmp_path, results_commit, outage_s=0.3)
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert hook.held[2] == [EventType.TOOL_RESULT], hook.held
    assert len(hook.held) > 4, "the results commit was not retried"
    # the seal closes the call (outcome unknown) in its own transaction
    assert hook.held[-1] == [EventType.TOOL_RESULT, EventType.TERMINAL], hook.held
    assert (tmp_path / MARKER).read_text() == "x\n", "the tool must have run exactly once"
    events = ledger.events(run_id)
    assert [e.type for e in events] == [
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.TERMINAL,
    ]
    assert events[-1].payload["state"] == "failed"
    assert events[-1].payload["reason"] == "tool_persistence_failed"
    assert events[-1].payload["failure_code"] == FailureCode.TOOL_PERSISTENCE_FAILED.value
    closed = events[-2].payload
    assert (closed["status"], closed["synthetic"]) == ("interrupted", True)
    assert "outcome unknown" in closed["content"] and "may have run" in closed["content"]
    assert [(r.call_id, r.status.value) for r in ledger.receipts(run_id)] == [("c1", "interrupted")]
    run = ledger.get_run(run_id)
    assert run is not None and run.failure_code is FailureCode.TOOL_PERSISTENCE_FAILED
    session = ledger.get_session(sid)
    assert session is not None and session.status is SessionStatus.DONE
    # a second delivery finds the session done and runs nothing again
    assert runner.run(sid) is SessionOutcome.ALREADY_DONE
    assert (tmp_path / MARKER).read_text() == "x\n"


def test_a_short_outage_at_the_turn_commit_is_ridden_out(tmp_path: Path) -> None:
    runner, ledger, sid, run_id, hook = start(tmp_path, lambda n, _t: n == 2, outage_s=5.0)
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert hook.held[1] == hook.held[2] == [EventType.ASSISTANT_OUTPUT, EventType.TOOL_CALL]
    completed_once(ledger, run_id, tmp_path)


def test_a_short_outage_at_the_results_commit_is_ridden_out(tmp_path: Path) -> None:
    failures = iter([True, True])  # the first two attempts of the results commit fail
    runner, ledger, sid, run_id, hook = start(
        tmp_path, lambda _n, t: results_commit(_n, t) and next(failures, False), outage_s=5.0
    )
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert hook.held[2:5] == [[EventType.TOOL_RESULT]] * 3, hook.held
    completed_once(ledger, run_id, tmp_path)


@pytest.mark.parametrize("point", [EventType.TOOL_RESULT, EventType.TERMINAL])
def test_a_commit_whose_acknowledgement_was_lost_is_not_applied_twice(
    tmp_path: Path, point: EventType
) -> None:
    """The commit landed, then the connection broke: the retry finds it and stops."""
    runner, ledger, sid, run_id, _hook = start(tmp_path, lambda _n, _t: False, outage_s=5.0)
    lost = []

    def ack() -> None:
        if not lost and ledger.events(run_id)[-1].type is point:
            lost.append(point)
            raise LedgerUnavailableError("injected: connection lost after COMMIT")

    ledger.ack_hook = ack
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert lost == [point]
    completed_once(ledger, run_id, tmp_path)
    session = ledger.get_session(sid)
    assert session is not None and session.status is SessionStatus.DONE


def test_after_a_long_outage_lost_results_end_the_run_tool_persistence_failed(
    tmp_path: Path,
) -> None:
    """Issue 11 item 10: the ledger is down from the results commit on for longer
    than a commit point rides out (here 1 s against 0.2 s).  The owner keeps the
    lease and retries the seal until the ledger is back: the run ends
    ``failed/tool_persistence_failed`` -- not closed ``interrupted`` by a later
    owner and continued to ``completed`` as if no result had been lost."""
    down_until: list[float] = []
    clock: list[FakeClock] = []  # the runner's: the owner waits out the outage on it

    def outage(_n: int, types: list[EventType]) -> bool:
        if not down_until and types == [EventType.TOOL_RESULT]:
            down_until.append(clock[0].monotonic() + 1.0)
        return bool(down_until) and clock[0].monotonic() < down_until[0]

    runner, ledger, sid, run_id, _hook = start(tmp_path, outage, outage_s=0.2)
    clock.append(runner.clock)  # type: ignore[arg-type]
    runner.ledger_seal_outage_s = 10.0
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert (tmp_path / MARKER).read_text() == "x\n", "the tool ran exactly once"
    events = ledger.events(run_id)
    assert events[-1].type is EventType.TERMINAL
    assert (events[-1].payload["state"], events[-1].payload["reason"]) == (
        "failed",
        "tool_persistence_failed",
    )
    # only the seal's synthetic result: outcome unknown, never the lost real one
    (closed,) = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert (closed.payload["status"], closed.payload["synthetic"]) == ("interrupted", True)
    assert runner.run(sid) is SessionOutcome.ALREADY_DONE
