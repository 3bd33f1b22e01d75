"""Case B13: a finished side effect is never repeated on resume (issue 6 item 3).

Recovery order on lease acquisition: a call with a receipt gets its result
rebuilt from the receipt; a call of an idempotent tool runs again with the
same idempotency key (the downstream deduplicates); any other call gets
"interrupted, outcome unknown".  Running recovery twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from nahida_workers.core.events import (
    Event,
    EventType,
    EvidenceKind,
    ExecutionReceipt,
    ToolStatus,
    input_fingerprint,
)
from nahida_workers.core.recovery import recovery_events
from nahida_workers.core.state import RunState
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.ports import Fence
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from tests.conftest import load_case

CASE = load_case("B13")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


class MailProvider:
    """The downstream: deduplicates by idempotency key, counts real sends."""

    sent: ClassVar[dict[str, str]] = {}
    sent_count: ClassVar[int] = 0

    @classmethod
    def send(cls, key: str) -> str:
        if key not in cls.sent:
            cls.sent_count += 1
            cls.sent[key] = f"msg-{len(cls.sent) + 1:04d}"
        return cls.sent[key]


class SendEmail(Tool):
    """Idempotent deliver tool: passes the idempotency key to the downstream."""

    spec = ToolSpec(
        name="send_email",
        description="t",
        input_schema={"type": "object"},
        idempotent=True,
        evidence_kind=EvidenceKind.DELIVER,
    )
    calls: ClassVar[int] = 0

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        type(self).calls += 1
        external_id = MailProvider.send(ctx.idempotency_key)
        return ToolOutcome(ToolStatus.OK, f"sent {external_id}", {"external_id": external_id})


class SendEmailNoKey(SendEmail):
    """The same tool when it cannot take an idempotency key: never retried blindly."""

    spec = ToolSpec(
        name="send_email",
        description="t",
        input_schema={"type": "object"},
        idempotent=False,
        evidence_kind=EvidenceKind.DELIVER,
    )


class AskHuman(Tool):
    spec = ToolSpec(name="ask_human", description="t", input_schema={"type": "object"})

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        raise AssertionError("ask_human must not run on resume in this test")


def _crashed_run(tool: type[Tool], *, with_receipt: bool) -> tuple[Any, str, str]:
    """The ledger of B13 before the pause, crashed after the mail went out."""
    MailProvider.sent, MailProvider.sent_count, SendEmail.calls = {}, 0, 0
    ledger = MemoryLedger()
    registry = ToolRegistry([tool(), AskHuman()])
    turns = [{"text": "unused"}, {"text": "The summary mail went out (msg-0001)."}]
    runner = memory_runner(ledger=ledger, registry_for=lambda _spec: registry)
    spec = scripted_spec(turns, tools=("send_email", "ask_human"))
    session, _ = Dispatcher(ledger, ListTaskQueue(), runner.clock).submit(spec, workspace=".")
    run_id = ledger.runs_of(session.session_id)[0].run_id
    epoch = ledger.bump_epoch(session.session_id, at=NOW)  # the first owner, now dead
    calls = CASE["input"]["ledger_before_pause"][0]["content"]
    events = [
        Event(
            run_id=run_id,
            sequence=2,
            type=EventType.ASSISTANT_OUTPUT,
            payload={
                "text": "",
                "turn": 0,
                "stop_reason": "tool_calls",
                "call_ids": [c["id"] for c in calls],
            },
        )
    ]
    for i, c in enumerate(calls):
        events.append(
            Event(
                run_id=run_id,
                sequence=3 + i,
                type=EventType.TOOL_CALL,
                call_id=c["id"],
                payload={
                    "call_id": c["id"],
                    "name": c["name"],
                    "arguments": c["input"],
                    "turn": 0,
                    "index": i,
                },
            )
        )
    key = f"{run_id}:call_mail"
    external_id = MailProvider.send(key)  # the first owner really sent it
    with ledger.transaction(fence=Fence(session.session_id, epoch)) as tx:
        ledger.append(tx, events)
        if with_receipt:
            ledger.append(
                tx,
                (),
                [
                    ExecutionReceipt(
                        run_id=run_id,
                        call_id="call_mail",
                        tool_name="send_email",
                        status=ToolStatus.OK,
                        started_at=NOW,
                        finished_at=NOW,
                        input_fingerprint=input_fingerprint(calls[0]["input"]),
                        evidence={"external_id": external_id, "idempotency_key": key},
                        evidence_kind=EvidenceKind.DELIVER,
                        idempotency_key=key,
                    )
                ],
            )
    return runner, session.session_id, run_id


def _results(ledger: Any, run_id: str) -> dict[str, dict[str, Any]]:
    return {e.call_id: e.payload for e in ledger.events(run_id) if e.type is EventType.TOOL_RESULT}


def test_crash_between_receipt_and_result_rebuilds_the_result_and_sends_nothing() -> None:
    runner, sid, run_id = _crashed_run(SendEmail, with_receipt=True)
    runner.run(sid)
    results = _results(runner.ledger, run_id)
    assert results["call_mail"]["status"] == "ok"
    assert results["call_mail"]["recovered_from_receipt"] is True
    assert "msg-0001" in results["call_mail"]["content"]
    assert results["call_ask"]["status"] == "interrupted"  # cannot be replayed blindly
    assert SendEmail.calls == 0 and MailProvider.sent_count == 1
    run = runner.ledger.get_run(run_id)
    assert run is not None and run.terminal_state is not None
    assert run.terminal_state.value == "completed"  # the claim "went out" has its receipt


def test_crash_before_the_receipt_reruns_with_the_same_key_and_sends_at_most_once() -> None:
    runner, sid, run_id = _crashed_run(SendEmail, with_receipt=False)
    runner.run(sid)
    results = _results(runner.ledger, run_id)
    assert results["call_mail"]["status"] == "ok" and "msg-0001" in results["call_mail"]["content"]
    assert SendEmail.calls == 1, "re-run once, with the same idempotency key"
    assert MailProvider.sent_count == 1, "the downstream deduplicated it"
    (receipt,) = [r for r in runner.ledger.receipts(run_id) if r.call_id == "call_mail"]
    assert receipt.idempotency_key == f"{run_id}:call_mail"


def test_a_tool_without_an_idempotency_key_is_closed_not_retried() -> None:
    runner, sid, run_id = _crashed_run(SendEmailNoKey, with_receipt=False)
    runner.run(sid)
    results = _results(runner.ledger, run_id)
    assert results["call_mail"]["status"] == "interrupted"
    assert SendEmail.calls == 0 and MailProvider.sent_count == 1


@pytest.mark.parametrize("with_receipt", [True, False])
def test_each_call_has_exactly_one_result_and_a_second_recovery_changes_nothing(
    with_receipt: bool,
) -> None:
    runner, sid, run_id = _crashed_run(SendEmail, with_receipt=with_receipt)
    runner.run(sid)
    events = runner.ledger.events(run_id)
    per_call = [e.call_id for e in events if e.type is EventType.TOOL_RESULT]
    assert sorted(per_call) == ["call_ask", "call_mail"]
    state = RunState.from_ledger(run_id, events, runner.ledger.receipts(run_id))
    assert recovery_events(state, now=NOW, epoch=99, rerunnable=lambda _c: True) == ()
