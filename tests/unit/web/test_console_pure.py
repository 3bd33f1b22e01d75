"""The console's pure parts: the conversation, reasons in words, waits, CSRF, the probe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.requests import Request

from nahida_workers.core.events import Event, EventType, ExecutionReceipt, ReasonCode, TerminalState
from nahida_workers.web.conversation import FOLD_LINES, block_of, conversation
from nahida_workers.web.csrf import CsrfGuard
from nahida_workers.web.probe import BrokerProbe
from nahida_workers.web.reasons import REASONS, STATES, explain
from nahida_workers.web.timeline import timeline_svg
from nahida_workers.web.waits import child_bars, wait_bars

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def _event(seq: int, type_: EventType, s: float, epoch: int = 1, **payload: Any) -> Event:
    call_id = payload.pop("call_id", None)
    return Event(
        run_id="r",
        sequence=seq,
        type=type_,
        payload=dict(payload),
        call_id=call_id,
        epoch=epoch,
        created_at=_at(s),
    )


def test_every_reason_and_state_is_explained_in_words() -> None:
    assert set(REASONS) == set(ReasonCode)
    assert set(STATES) == set(TerminalState)
    text = explain("failed", "doom_loop")
    assert "could not go on" in text and "repeating itself" in text
    assert explain("weird", "new_code") == "The run ended weird. Reason: new_code."
    assert explain(None, None) == ""


def test_blocks_are_text_folded_when_long_and_binary_summarised() -> None:
    assert block_of("it's").text == "it's"  # never \u0027
    assert '"quote": "it\'s"' in block_of({"quote": "it's"}).text
    long = block_of("\n".join(f"line {i}" for i in range(FOLD_LINES + 5)))
    assert long.folded and "lines" in long.summary
    capped = block_of(
        {"capped": True, "head": "HEAD", "tail": "TAIL", "size": 9000, "sha256": "ab"}
    )
    assert capped.folded and "HEAD" in capped.text and "9000 bytes" in capped.text
    binary = block_of("PNG\x00\x01\x02" * 100)
    assert binary.binary and binary.text == "" and "binary content, 600 bytes" in binary.summary


def test_a_run_reads_as_a_conversation() -> None:
    events = [
        _event(1, EventType.USER_INPUT, 0, epoch=0, text="do it", source="prompt"),
        _event(2, EventType.ASSISTANT_OUTPUT, 1, text="calling", turn=0, stop_reason="tool_calls"),
        _event(3, EventType.TOOL_CALL, 1, call_id="c1", name="Read", arguments={"path": "a"}),
        _event(4, EventType.TOOL_RESULT, 2, call_id="c1", status="ok", content="body"),
        _event(5, EventType.CONTROL, 2, kind="parked", awaiting=["k"], calls=["t"]),
        _event(6, EventType.USER_INPUT, 3, text="also this", kind="user"),
        _event(7, EventType.ASSISTANT_OUTPUT, 4, text="done", turn=1, stop_reason="end_turn"),
        _event(
            8, EventType.TERMINAL, 4, state="completed", reason="answer_accepted", final_text="done"
        ),
    ]
    receipt = ExecutionReceipt(
        run_id="r",
        call_id="c1",
        tool_name="Read",
        status="ok",
        started_at=_at(1.0),
        finished_at=_at(1.25),
        input_fingerprint="f" * 64,
        evidence={"sha256": "x"},
    )
    items = conversation(events, [receipt])
    assert [i.kind for i in items] == [
        "prompt",
        "assistant",
        "note",
        "user",
        "assistant",
        "terminal",
    ]
    call = items[1].calls[0]
    assert (
        call.name == "Read" and call.status == "ok" and call.result and call.result.text == "body"
    )
    assert '"path": "a"' in call.arguments.text and "ok in 250 ms" in call.receipt
    assert "parked: waiting on 1 child session" in items[2].label
    assert "passed every completion check" in items[-1].explanation


def test_waits_show_queue_parked_retries_and_child_lanes() -> None:
    events = [
        _event(1, EventType.USER_INPUT, 0, epoch=0, text="go"),
        _event(2, EventType.ASSISTANT_OUTPUT, 2, epoch=1, turn=0),
        _event(3, EventType.CONTROL, 3, epoch=1, kind="parked", awaiting=["k"], calls=["t"]),
        _event(4, EventType.TOOL_RESULT, 30, epoch=2, call_id="t", status="ok"),
        _event(5, EventType.ASSISTANT_OUTPUT, 31, epoch=2, turn=1),
        _event(6, EventType.ASSISTANT_OUTPUT, 40, epoch=3, turn=2),
    ]
    bars = wait_bars(events, _at(0), _at(0))
    kinds = [(b.kind, b.start_s, b.end_s) for b in bars]
    # queued until the first owner wrote; parked 27 s (no retry bar for it); a real retry
    assert kinds == [("queue", 0.0, 2.0), ("parked", 3.0, 30.0), ("retry", 31.0, 40.0)]
    kids = {"t": [{"session_id": "k" * 32, "state": "completed", "created_at": _at(3),
                   "runs": [(_at(4), _at(29), "completed")]}]}  # fmt: skip
    lanes = child_bars(kids, ["t"], _at(0))
    assert [(b.label, b.start_s, b.end_s) for b in lanes] == [
        ("queued", 3.0, 4.0),
        ("completed", 4.0, 29.0),
    ]
    svg = timeline_svg([*bars, *lanes])
    assert svg.count('class="bar wait') == 3 and svg.count('class="bar child') == 2
    assert ">waiting<" in svg and ">child kkkkkkkk<" in svg


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


@pytest.mark.parametrize("api_token", ["secret", ""])
def test_csrf_token_needed_with_a_cookie_and_other_sites_refused(api_token: str) -> None:
    guard = CsrfGuard(api_token)
    host = {"host": "console.example:8000"}
    assert guard.refusal(_request({**host, "x-csrf-token": guard.token})) is None
    assert "no CSRF token" in (guard.refusal(_request(host)) or "")
    assert "not this server's" in (guard.refusal(_request({**host, "x-csrf-token": "x"})) or "")
    other = {**host, "origin": "https://evil.example", "x-csrf-token": guard.token}
    assert "another site" in (guard.refusal(_request(other)) or "")
    assert guard.refusal(_request({**host, "authorization": "Bearer t"})) is None
    assert CsrfGuard(api_token).token == guard.token or not api_token  # stable per token


def test_probe_says_unknown_for_a_broker_it_cannot_ask() -> None:
    probe = BrokerProbe("memory://localhost/")
    assert probe.queue_depths() == {"sessions": None, "tools": None}
    assert probe.live_workers() is None
    down = BrokerProbe("redis://127.0.0.1:1/0")
    assert down.queue_depths() == {"sessions": None, "tools": None}


def test_dashboard_buckets_sit_on_five_minute_boundaries() -> None:
    from nahida_workers.web import dashboard

    class Ledger:
        reader = engine = None

        def session_counts(self) -> dict[Any, Any]:
            return {}

    captured: list[Any] = []

    class Conn:
        def execute(self, query: Any) -> Any:
            captured.append(query)
            return self

        def all(self) -> list[Any]:
            return [(_at(3600 + 170), "completed"), (_at(3600 + 290), "failed")]

    class Scope:
        def __init__(self, _engine: Any) -> None: ...
        def __enter__(self) -> Conn:
            return Conn()

        def __exit__(self, *exc: Any) -> None: ...

    monkey = pytest.MonkeyPatch()
    monkey.setattr(dashboard, "ReadScope", Scope)
    monkey.setattr(dashboard, "due_schedules", lambda *_a, **_k: [])
    try:
        probe = BrokerProbe("memory://localhost/")
        for now_s in (3600 + 180, 3600 + 299):  # the same bucket: the same figures
            d = dashboard.read_dashboard(Ledger(), probe, _at(now_s))  # type: ignore[arg-type]
            assert d.buckets[-1]["start"] == _at(3600)
            assert (d.buckets[-1]["ended"], d.buckets[-1]["failed"]) == (2, 1)
            assert (d.throughput, d.failures) == (2, 1)
    finally:
        monkey.undo()
