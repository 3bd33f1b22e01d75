"""The commit points of DESIGN.md section 3, with a ledger whose commit fails on cue.

(a) If the transaction that commits a provider turn fails, no tool starts and
    nothing of that turn is in the ledger.
(b) If the transaction that commits tool results fails, the run ends
    ``failed/tool_persistence_failed`` -- the side effect happened once and is
    never repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType, FailureCode, SessionStatus
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatcher import Dispatcher
from nahida_workers.runtime.session import SessionOutcome, SessionRunner
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
    """``commit_hook`` that fails transaction number ``fail_at`` (1-based).

    It also records which event types each transaction was about to commit,
    so a test can prove it failed the commit point it meant to.
    """

    ledger: MemoryLedger
    run_id: str
    fail_at: int
    count: int = 0
    committed_len: int = 0
    held: list[list[EventType]] = field(default_factory=list)

    def __call__(self) -> None:
        self.count += 1
        pending = self.ledger.events(self.run_id)[self.committed_len :]
        self.held.append([e.type for e in pending])
        if self.count == self.fail_at:
            raise LedgerUnavailableError(f"injected failure of transaction {self.count}")
        self.committed_len += len(pending)


def start(tmp_path: Path, fail_at: int) -> tuple[SessionRunner, MemoryLedger, str, str, FailAt]:
    clock = FakeClock()
    ledger = MemoryLedger()
    runner = memory_runner(ledger=ledger, clock=clock)
    spec = scripted_spec(TURNS, tools=["Bash"])
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(tmp_path))
    run_id = ledger.runs_of(session.session_id)[0].run_id
    hook = FailAt(ledger, run_id, fail_at, committed_len=len(ledger.events(run_id)))
    ledger.commit_hook = hook
    return runner, ledger, session.session_id, run_id, hook


def test_a_failed_turn_commit_starts_no_tool_and_leaves_nothing(tmp_path: Path) -> None:
    # transactions of runner.run: 1 bump_epoch, 2 the provider turn, ...
    runner, ledger, sid, run_id, hook = start(tmp_path, fail_at=2)
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
    # 1 bump_epoch, 2 the provider turn, 3 the tool results, 4 the terminal commit
    runner, ledger, sid, run_id, hook = start(tmp_path, fail_at=3)
    assert runner.run(sid) is SessionOutcome.FINISHED
    assert hook.held[2] == [EventType.TOOL_RESULT], hook.held
    assert hook.held[3] == [EventType.TERMINAL], hook.held
    assert (tmp_path / MARKER).read_text() == "x\n", "the tool must have run exactly once"
    events = ledger.events(run_id)
    assert [e.type for e in events] == [
        EventType.USER_INPUT,
        EventType.ASSISTANT_OUTPUT,
        EventType.TOOL_CALL,
        EventType.TERMINAL,
    ]
    assert events[-1].payload["state"] == "failed"
    assert events[-1].payload["reason"] == "tool_persistence_failed"
    assert events[-1].payload["failure_code"] == FailureCode.TOOL_PERSISTENCE_FAILED.value
    assert ledger.receipts(run_id) == []
    run = ledger.get_run(run_id)
    assert run is not None and run.failure_code is FailureCode.TOOL_PERSISTENCE_FAILED
    session = ledger.get_session(sid)
    assert session is not None and session.status is SessionStatus.DONE
    # a second delivery finds the session done and runs nothing again
    assert runner.run(sid) is SessionOutcome.ALREADY_DONE
    assert (tmp_path / MARKER).read_text() == "x\n"
