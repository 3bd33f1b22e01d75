"""Every call has a receipt; checked evidence is ``verified`` (issue 10 item 7)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import Event, EventType, ToolStatus, VerificationStatus
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ports import Fence
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, memory_runner, run_inline, scripted_spec
from tests.unit.runtime.test_recovery_b13 import SendEmailNoKey, _crashed_run

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def one_receipt_per_call(ledger: Any, run_id: str) -> dict[str, Any]:
    calls = [e.call_id for e in ledger.events(run_id) if e.type is EventType.TOOL_CALL]
    receipts = ledger.receipts(run_id)
    assert sorted(r.call_id for r in receipts) == sorted(calls), "one receipt per call"
    return {r.call_id: r for r in receipts}


def test_a_call_recovery_closes_as_interrupted_gets_an_interrupted_receipt() -> None:
    runner, sid, run_id = _crashed_run(SendEmailNoKey, with_receipt=False)
    runner.run(sid)
    receipts = one_receipt_per_call(runner.ledger, run_id)
    results = {
        e.call_id: e for e in runner.ledger.events(run_id) if e.type is EventType.TOOL_RESULT
    }
    for call_id in ("call_mail", "call_ask"):
        receipt = receipts[call_id]
        assert receipt.status is ToolStatus.INTERRUPTED
        assert receipt.evidence == {"error_code": "interrupted", "synthetic": True}
        assert receipt.verification_status is VerificationStatus.NOT_APPLICABLE
        assert receipt.epoch == results[call_id].epoch, "committed with its result"


def _dead_owner_left_a_bash_call(turns: list[dict[str, Any]]) -> tuple[SessionRunner, str, str]:
    ledger = MemoryLedger()
    runner = memory_runner(ledger=ledger)
    spec = scripted_spec(turns, tools=("Bash",))
    session, _ = Dispatcher(ledger, ListTaskQueue(), runner.clock).submit(spec, workspace=".")
    run_id = ledger.runs_of(session.session_id)[0].run_id
    epoch = ledger.bump_epoch(session.session_id, at=NOW)
    call = {"call_id": "b", "name": "Bash", "arguments": {"command": "make test"}}
    with ledger.transaction(fence=Fence(session.session_id, epoch)) as tx:
        ledger.append(
            tx,
            [
                Event(
                    run_id=run_id,
                    sequence=2,
                    type=EventType.ASSISTANT_OUTPUT,
                    payload={"text": "", "turn": 0, "stop_reason": "tool_calls", "call_ids": ["b"]},
                ),
                Event(
                    run_id=run_id,
                    sequence=3,
                    type=EventType.TOOL_CALL,
                    call_id="b",
                    payload={**call, "turn": 0, "index": 0},
                ),
            ],
        )
    return runner, session.session_id, run_id


def test_the_sweeper_settling_a_session_leaves_no_call_without_a_receipt() -> None:
    runner, sid, run_id = _dead_owner_left_a_bash_call([{"text": "unused"}])
    assert runner.settle(sid)
    (receipt,) = one_receipt_per_call(runner.ledger, run_id).values()
    assert receipt.status is ToolStatus.INTERRUPTED
    assert runner.ledger.get_run(run_id).terminal_reason.value == "abandoned"  # type: ignore[union-attr]


def test_an_interrupted_receipt_backs_no_claim_that_the_command_ran() -> None:
    runner, sid, run_id = _dead_owner_left_a_bash_call(
        [{"text": "unused"}, {"text": "I ran the tests."}]
    )
    runner.run(sid)
    run = runner.ledger.get_run(run_id)
    assert run is not None and run.terminal_reason is not None
    assert run.terminal_reason.value == "claim_without_receipt"


@pytest.mark.parametrize(
    ("call", "status"),
    [
        ({"name": "Read", "arguments": {"path": "calc.py"}}, VerificationStatus.VERIFIED),
        ({"name": "Glob", "arguments": {"pattern": "*.py"}}, VerificationStatus.UNVERIFIED),
        (
            {"name": "Bash", "arguments": {"command": "python3 -m pytest -q -p no:cacheprovider"}},
            VerificationStatus.VERIFIED,
        ),
        ({"name": "Bash", "arguments": {"command": "echo hi"}}, VerificationStatus.UNVERIFIED),
        ({"name": "Bash", "arguments": {"command": "exit 3"}}, VerificationStatus.NOT_APPLICABLE),
        (
            {"name": "Write", "arguments": {"path": "x.txt", "content": "x"}},
            VerificationStatus.UNVERIFIED,
        ),
    ],
    ids=["read-sha256", "glob", "bash-test-passed", "bash-not-a-check", "bash-failed", "write"],
)
def test_verification_status_of_receipts(
    call: dict[str, Any], status: VerificationStatus, tmp_path: Path
) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    )
    turns = [{"tool_calls": [{"id": "c", **call}]}, {"text": "Noted."}]
    result = run_inline(scripted_spec(turns, tools=("Read", "Glob", "Bash", "Write")), tmp_path)
    (receipt,) = result.receipts
    assert receipt.verification_status is status
