"""DESIGN.md section 3 steps 2 and 3 for a turn with several calls, on every ledger backend.

Step 3: ``assistant_output`` and *every* ``tool_call``, in the provider's
order, are committed in one transaction; if that commit fails, no tool starts.
``test_commit_points_backends.py`` proves it for one call; here three calls
(ids deliberately not in sorted order) must land together, in order, with
consecutive sequences -- and none of the three may start when the commit fails.

Step 2: text deltas are display only.  A real OpenAI-compatible stream (httpx
mock transport, one SSE chunk at a time) reports what the ledger holds while
each delta is read: no ``assistant_output`` is written before the stream ends,
and a stream cut off mid-way leaves no partial ``assistant_output`` at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from nahida_workers.core.events import EventType, EvidenceKind, ToolStatus
from nahida_workers.errors import LedgerUnavailableError
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.providers import OpenAICompatProvider
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import FakeClock, ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from tests.unit.runtime.test_commit_points_backends import _fail_commits

CALL_IDS = ["zeta", "alpha", "mid"]  # provider order, not sorted order
TURNS = [
    {
        "text": "Three calls.",
        "tool_calls": [{"id": c, "name": "Record", "arguments": {}} for c in CALL_IDS],
    },
    {"text": "Done."},
]


class Record(Tool):
    """Exclusive tool that records that it started (the call id)."""

    started: ClassVar[list[str]] = []
    spec = ToolSpec(
        name="Record",
        description="record the start",
        input_schema={"type": "object"},
        evidence_kind=EvidenceKind.OBSERVE,
        timeout_s=30.0,
    )

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Append ``ctx.call_id`` to :attr:`started`."""
        Record.started.append(ctx.call_id)
        return ToolOutcome(ToolStatus.OK, f"recorded {ctx.call_id}", {})


def _start(
    ledger: Any, tmp_path: Path, turns: list[dict[str, Any]], **kw: Any
) -> tuple[SessionRunner, str, str]:
    Record.started.clear()
    clock = FakeClock()
    registry = ToolRegistry([Record()])
    runner = memory_runner(ledger=ledger, clock=clock, registry_for=lambda _s: registry, **kw)
    spec = scripted_spec(turns, tools=["Record"])
    session, _ = Dispatcher(ledger, ListTaskQueue(), clock).submit(spec, workspace=str(tmp_path))
    return runner, session.session_id, ledger.runs_of(session.session_id)[0].run_id


TURN_TX = [EventType.ASSISTANT_OUTPUT] + [EventType.TOOL_CALL] * len(CALL_IDS)


def test_every_call_of_a_turn_commits_with_its_output_in_provider_order(
    ledger: Any, tmp_path: Path
) -> None:
    runner, sid, run_id = _start(ledger, tmp_path, TURNS)
    held = _fail_commits(ledger, lambda _types: False)  # a spy: nothing fails
    runner.run(sid)
    assert TURN_TX in held, held  # one transaction for the output and all three calls
    assert not any(EventType.TOOL_CALL in t and t != TURN_TX for t in held), held
    events = ledger.events(run_id)
    output = next(e for e in events if e.type is EventType.ASSISTANT_OUTPUT)
    calls = [e for e in events if e.type is EventType.TOOL_CALL]
    assert [e.call_id for e in calls] == CALL_IDS
    assert [e.sequence for e in calls] == [output.sequence + i for i in (1, 2, 3)]
    assert Record.started == CALL_IDS


def test_a_failed_turn_commit_starts_none_of_its_calls(ledger: Any, tmp_path: Path) -> None:
    runner, sid, run_id = _start(ledger, tmp_path, TURNS)
    runner.ledger_outage_s = 0.3  # every retry of the turn commit fails too
    held = _fail_commits(ledger, lambda types: EventType.TOOL_CALL in types)
    with pytest.raises(LedgerUnavailableError):
        runner.run(sid)
    assert held and held[0] == TURN_TX, held
    assert Record.started == [], "a tool started although its call was not committed"
    assert [e.type for e in ledger.events(run_id)] == [EventType.USER_INPUT]
    assert ledger.receipts(run_id) == []


# -- step 2: text deltas are display only ----------------------------------------------
DELTAS = ["Hel", "lo, ", "wor", "ld."]


def _chunk(delta: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def _end() -> bytes:
    body = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n".encode()


def _streaming_provider(
    ledger: Any, run_id: list[str], seen: list[list[EventType]], *, cut: str | None
) -> OpenAICompatProvider:
    """Streams :data:`DELTAS` one chunk at a time; records the ledger before each chunk.

    With ``cut="reset"`` the connection breaks after two deltas (a read error,
    as httpx raises when the peer resets mid-body); with ``cut="eof"`` the body
    simply ends there, with no finish reason and no ``[DONE]``.
    """

    def body() -> Iterator[bytes]:
        for delta in DELTAS[:2] if cut else DELTAS:
            seen.append([e.type for e in ledger.events(run_id[0])])
            yield _chunk(delta)
        if cut == "reset":
            raise httpx.ReadError("connection reset mid-stream")
        if cut == "eof":
            return
        seen.append([e.type for e in ledger.events(run_id[0])])
        yield _end()

    def handle(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    client = httpx.Client(transport=httpx.MockTransport(handle))
    return OpenAICompatProvider(
        base_url="http://llm.test/v1", model="m", client=client, max_retries=0
    )


def _stream_run(
    ledger: Any, tmp_path: Path, *, cut: str | None
) -> tuple[str, list[list[EventType]]]:
    run_id: list[str] = []
    seen: list[list[EventType]] = []
    provider = _streaming_provider(ledger, run_id, seen, cut=cut)
    runner, sid, rid = _start(
        ledger, tmp_path, [{"text": "unused"}], provider_for=lambda _s: provider
    )
    run_id.append(rid)
    runner.run(sid)
    return rid, seen


def test_streamed_deltas_reach_the_ledger_only_as_the_committed_turn(
    ledger: Any, tmp_path: Path
) -> None:
    run_id, seen = _stream_run(ledger, tmp_path, cut=None)
    assert len(seen) == len(DELTAS) + 1, "the transport was read chunk by chunk"
    assert all(EventType.ASSISTANT_OUTPUT not in types for types in seen), seen
    outputs = [e for e in ledger.events(run_id) if e.type is EventType.ASSISTANT_OUTPUT]
    assert len(outputs) == 1, "one committed output for the whole stream, not one per delta"
    assert outputs[0].payload["text"] == "".join(DELTAS)


def test_a_stream_cut_mid_answer_leaves_no_partial_output(ledger: Any, tmp_path: Path) -> None:
    run_id, seen = _stream_run(ledger, tmp_path, cut="reset")
    assert len(seen) == 2, "both deltas were streamed before the cut"
    events = ledger.events(run_id)
    assert EventType.ASSISTANT_OUTPUT not in [e.type for e in events], events
    assert not any("Hel" in repr(dict(e.payload)) for e in events), "partial text was stored"
    run = ledger.get_run(run_id)
    assert run is not None and run.terminal_state is not None
    assert run.terminal_state.value == "failed"


def test_a_stream_ended_before_its_end_marker_is_not_a_completed_answer(tmp_path: Path) -> None:
    ledger = MemoryLedger()
    run_id, seen = _stream_run(ledger, tmp_path, cut="eof")
    assert len(seen) == 2
    run = ledger.get_run(run_id)
    assert run is not None and run.terminal_state is not None
    assert run.terminal_state.value != "completed", "half an answer was accepted"
