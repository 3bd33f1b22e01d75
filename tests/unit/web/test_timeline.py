"""The run timeline drawn from ledger rows (pure): lanes, overlap, marks, escaping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nahida_workers.core.events import Event, EventType, ExecutionReceipt, ToolStatus
from nahida_workers.web.timeline import bars_of, overlapping_pairs, timeline_svg

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _event(seq: int, kind: EventType, ms: float, **payload: object) -> Event:
    call_id = payload.pop("call_id", None)
    return Event(
        run_id="r",
        sequence=seq,
        type=kind,
        payload=dict(payload),
        call_id=call_id,  # type: ignore[arg-type]
        epoch=1,
        created_at=_at(ms),
    )


def _receipt(call_id: str, start: float, end: float, status: ToolStatus) -> ExecutionReceipt:
    return ExecutionReceipt(
        run_id="r",
        call_id=call_id,
        tool_name="Read",
        status=status,
        started_at=_at(start),
        finished_at=_at(end),
        input_fingerprint="f" * 64,
        evidence={"note": "<b>&"},
    )


def test_parallel_calls_overlap_and_orphans_are_marked() -> None:
    events = [
        _event(1, EventType.USER_INPUT, 0, text="go"),
        _event(2, EventType.ASSISTANT_OUTPUT, 50, turn=0, stop_reason="tool_calls"),
        _event(3, EventType.TOOL_CALL, 50, call_id="a", name="Read"),
        _event(4, EventType.TOOL_CALL, 50, call_id="b", name="Read"),
        _event(5, EventType.TOOL_CALL, 50, call_id="c", name="Bash"),
        _event(6, EventType.TOOL_RESULT, 200, call_id="a", status="ok"),
        _event(7, EventType.TOOL_RESULT, 200, call_id="b", status="timed_out"),
        _event(8, EventType.TOOL_RESULT, 900, call_id="c", status="interrupted", synthetic=True),
        _event(9, EventType.ASSISTANT_OUTPUT, 950, turn=1, stop_reason="end_turn"),
    ]
    receipts = [
        _receipt("a", 60, 160, ToolStatus.OK),
        _receipt("b", 61, 190, ToolStatus.TIMED_OUT),
    ]
    bars = bars_of(events, receipts, placement={"Read": "remote"})
    kinds = [(b.kind, b.label, b.status) for b in bars]
    assert kinds == [
        ("provider", "turn 0", "tool_calls"),
        ("tool", "Read", "ok"),
        ("tool", "Read", "timed_out"),
        ("tool", "Bash", "interrupted"),
        ("provider", "turn 1", "end_turn"),
    ]
    orphan = bars[3]
    assert orphan.synthetic and orphan.placement == "inline"
    assert (orphan.start_s, orphan.end_s) == (0.05, 0.9)  # call commit -> synthetic result
    assert overlapping_pairs(bars) == 3
    svg = timeline_svg(bars, title="run <r>")
    assert svg.count('class="bar tool') == 3
    assert svg.count(" marked") == 2  # timed_out and the synthetic interrupted result
    assert 'stroke-dasharray="4 2"' in svg  # no receipt: dashed
    assert "&lt;b&gt;&amp;" in svg and "<b>" not in svg and "run &lt;r&gt;" in svg
