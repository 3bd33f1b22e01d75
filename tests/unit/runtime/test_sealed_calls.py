"""A parent cancelled while parked on its Task children closes their calls in its run.

DESIGN.md sections 2-3: every tool_call gets its result and its receipt.
The cancelled parent's seal writes, in its own transaction and before the
terminal event, a synthetic ``cancelled`` result + receipt per open Task
call (in call order); ``runs show`` shows no call without a receipt, and the
projection of the run (OpenAI and Anthropic shapes) pairs each call with
that result -- not with the generic "worker was lost" text a later run
would otherwise invent.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from nahida_workers.cli.render import print_run
from nahida_workers.core.events import EventType, SessionStatus, ToolStatus
from nahida_workers.core.messages import ProviderRequest, ToolResultMessage
from nahida_workers.core.payloads import INTERRUPTED_TEXT
from nahida_workers.core.transcript import project
from nahida_workers.providers.payloads import anthropic_messages, openai_messages
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.testing.doubles import memory_runner
from nahida_workers.testing.validate import validate_anthropic_messages, validate_openai_messages
from tests.unit.runtime.test_children import AGENTS, World, profile, task
from tests.unit.runtime.test_children_background import RUN, submit, terminal


@pytest.fixture
def w(ledger: Any) -> World:
    """A one-slot fleet over every ledger backend (memory, SQLite, PostgreSQL)."""
    return World(memory_runner(ledger=ledger))


def _cancel_parked_parent(w: World) -> tuple[str, str]:
    agents = {**AGENTS, "slow": profile({"text": "Slow."})}
    turns = [
        {"text": "go", "tool_calls": [task("call_a", "slow"), task("call_b", "slow")]},
        {"text": "x"},
    ]
    parent = submit(w, turns, agents=agents)
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    ledger = w.runner.ledger
    assert ledger.get_session(parent).status is SessionStatus.WAITING
    report = Inbox(ledger, w.runner.leases, w.dispatcher, w.runner.clock).cancel(parent)
    # No worker holds the parked parent or its queued children: the cancel seals all three.
    assert report.sealed[-1] == parent and len(report.sealed) == 3
    assert w.runner.run(parent) is SessionOutcome.ALREADY_DONE
    return parent, ledger.runs_of(parent)[-1].run_id


def test_a_parked_parent_cancelled_closes_its_open_task_calls_in_its_run(
    w: World,
) -> None:
    parent, run_id = _cancel_parked_parent(w)
    ledger = w.runner.ledger
    assert terminal(ledger, parent)["state"] == "cancelled"
    events = ledger.events(run_id)
    assert events[-1].type is EventType.TERMINAL  # nothing after it
    results = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == ["call_a", "call_b"]  # call order
    assert all(e.sequence > 0 and e.sequence < events[-1].sequence for e in results)
    for e in results:
        assert (e.payload["status"], e.payload["synthetic"]) == ("cancelled", True)
        assert "outcome unknown" in e.payload["content"]
    receipts = ledger.receipts(run_id)
    assert [(r.call_id, r.status) for r in receipts] == [
        ("call_a", ToolStatus.CANCELLED),
        ("call_b", ToolStatus.CANCELLED),
    ]
    # the cancel covered both children (sealed in the same transaction)
    w.pump()
    for call in ("call_a", "call_b"):
        assert terminal(ledger, child_id(RUN, call))["state"] == "cancelled"
    # the sealed run is never written again (the children's completions are inbox rows)
    assert ledger.events(run_id) == events


def test_runs_show_and_both_projections_see_the_cancelled_results(w: World) -> None:
    _parent, run_id = _cancel_parked_parent(w)
    ledger = w.runner.ledger
    events = ledger.events(run_id)
    out = io.StringIO()
    print_run(Console(file=out, width=200), ledger.get_run(run_id), events, ledger.receipts(run_id))
    shown = out.getvalue()
    assert "receipt: none" not in shown
    assert shown.count("receipt cancelled") == 2 and shown.count("cancelled synthetic") == 2

    messages = project(events)
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [r.call_id for r in results] == ["call_a", "call_b"]
    assert all(r.is_error and r.content != INTERRUPTED_TEXT for r in results)
    assert all(r.content.startswith("cancelled:") for r in results)
    request = ProviderRequest(run_id=run_id, turn_index=0, messages=tuple(messages))
    openai: list[dict[str, Any]] = openai_messages(request)
    tool_msgs = [m for m in openai if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_a", "call_b"]
    calls = next(m for m in openai if m.get("tool_calls"))
    assert [c["id"] for c in calls["tool_calls"]] == ["call_a", "call_b"]
    anthropic = anthropic_messages(request)
    blocks = [
        b
        for m in anthropic
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert [b["tool_use_id"] for b in blocks] == ["call_a", "call_b"]
    assert all(b.get("is_error") for b in blocks)
    validate_openai_messages(openai)  # the pairing validators the chaos run uses
    validate_anthropic_messages(anthropic)
    json.dumps(openai), json.dumps(anthropic)  # both bodies serialise
