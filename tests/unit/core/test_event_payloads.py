"""Typed event payloads (core/event_payloads.py): one model per event type."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nahida_workers.core.event_payloads import (
    PAYLOAD_MODELS,
    AssistantOutputPayload,
    ControlPayload,
    ToolResultPayload,
    UserInputPayload,
    parse_payload,
    payload_json,
)
from nahida_workers.core.events import Event, EventType


def _event(kind: EventType, payload: dict[str, object]) -> Event:
    return Event(run_id="r", sequence=1, type=kind, payload=payload)


def test_every_event_type_has_one_payload_model() -> None:
    assert set(PAYLOAD_MODELS) == {t.value for t in EventType}
    assert all(PAYLOAD_MODELS[t].event_type == t for t in PAYLOAD_MODELS)


def test_a_mapping_payload_becomes_its_event_types_model() -> None:
    event = _event(EventType.TOOL_RESULT, {"call_id": "c", "status": "ok", "content": "x"})
    assert isinstance(event.payload, ToolResultPayload)
    assert event.payload.status == "ok" and event.payload.content == "x"
    assert isinstance(_event(EventType.CONTROL, {"kind": "bound"}).payload, ControlPayload)


def test_the_stored_json_keeps_exactly_the_keys_it_was_built_with() -> None:
    """Unset optional fields are never written; unknown keys are kept (old rows)."""
    data = {"text": "hi", "legacy": {"n": [1, None]}}
    event = _event(EventType.USER_INPUT, data)
    assert payload_json(event.payload) == data
    assert event.model_dump()["payload"] == data
    assert Event.model_validate(event.model_dump()) == event


def test_a_payload_reads_like_the_mapping_it_was_built_from() -> None:
    payload = _event(EventType.USER_INPUT, {"text": "hi", "source": "prompt"}).payload
    assert payload["text"] == "hi" and payload.get("message_id") is None
    assert "source" in payload and "artifact" not in payload
    assert {**payload} == {"text": "hi", "source": "prompt"} == payload
    with pytest.raises(KeyError):
        payload["artifact"]


def test_values_are_made_storable_before_the_model_is_built() -> None:
    payload = _event(EventType.USER_INPUT, {"text": "a\x00b"}).payload
    assert isinstance(payload, UserInputPayload) and "\x00" not in str(payload.text)


@pytest.mark.parametrize(
    ("kind", "bad"),
    [
        (EventType.ASSISTANT_OUTPUT, {"turn": "first"}),
        (EventType.ASSISTANT_OUTPUT, {"call_ids": "c1"}),
        (EventType.TOOL_RESULT, {"is_error": "maybe"}),
        (EventType.TOOL_CALL, {"index": [0]}),
        (EventType.TERMINAL, {"state": 3}),
        (EventType.CONTROL, {"kind": {"nested": True}}),
    ],
)
def test_the_read_edge_rejects_a_payload_of_the_wrong_shape(
    kind: EventType, bad: dict[str, object]
) -> None:
    with pytest.raises(ValidationError):
        parse_payload(kind.value, bad)


def test_the_read_edge_accepts_capped_text_and_optional_keys() -> None:
    capped = {"capped": True, "head": "H", "tail": "T", "sha256": "0" * 64, "size": 9}
    parsed = parse_payload("assistant_output", {"text": capped, "turn": 0, "call_ids": []})
    assert isinstance(parsed, AssistantOutputPayload) and parsed.text == capped
    assert parsed.as_json() == {"text": capped, "turn": 0, "call_ids": []}


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "parked", "awaiting": "child-1", "calls": ["c1"]},
        {"kind": "parked", "calls": ["c1"]},
        {"kind": "parked", "team": "t"},
        {"kind": "parked", "awaiting": [], "calls": [], "team": "t", "waiting_on": "idle"},
        {"kind": "team"},
        {"kind": "recovery", "epoch": "two", "closed": []},
        {"kind": "stop_hook", "candidate": 3},
        {"kind": "truncation", "attempt": [1]},
        {"kind": "correction"},
        {"kind": "repair", "anomaly": "malformed_tool_call", "turn": "last"},
        {"kind": "bound", "bound": ["doom_loop"]},
        {"kind": "lease", "event": "retaken", "epoch": 1},
        {"kind": "lease", "event": "lost", "reason": "another_owner", "epoch": "one"},
        {"kind": "handover", "reason": "worker_shutdown", "epoch": 3, "unstarted": "c1"},
        {"kind": "workspace_base", "commit": 40},
        {"kind": "verifier_started", "child": "v", "purpose": "gate"},
        {"kind": "verifier_started", "child": "v", "purpose": "gate", "revision": "three"},
        {"kind": "verifier_verdict", "child": "v", "purpose": "gate", "revision": 1},
        {
            "kind": "verifier_verdict",
            "child": "v",
            "purpose": "goal",
            "revision": 1,
            "verdict": "PASS",
            "reasons": "fine",
        },
        {"kind": "goal", "goal": "job", "from": "active"},
        {"kind": "context", "instructions": "AGENTS.md"},
        {"kind": "self_check"},
    ],
)
def test_the_read_edge_checks_the_shape_of_each_known_control_kind(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        parse_payload("control", bad)


def test_every_control_kind_the_code_writes_has_a_shape_and_unknown_kinds_stay_open() -> None:
    from nahida_workers.core.control_kinds import CONTROL_SHAPES

    good = [
        {"kind": "parked", "awaiting": ["k1", "k2"], "calls": ["c1", "c2"]},
        {"kind": "parked", "team": "lead-1", "waiting_on": "idle"},
        {"kind": "team", "nudge": "claimable"},
        {"kind": "recovery", "epoch": 2, "rebuilt": [], "rerun": ["c1"], "closed": ["c2"]},
        {"kind": "stop_hook", "candidate": 4, "verdict": "block", "message": "m", "hook": "h"},
        {"kind": "truncation", "attempt": 1},
        {"kind": "correction", "stage": "evidence"},
        {"kind": "repair", "anomaly": "malformed_tool_call", "turn": None},
        {"kind": "bound", "bound": "doom_loop", "key": "Bash:abc"},
        {"kind": "lease", "event": "retaken", "reason": "lease_store_empty", "epoch": 1},
        {"kind": "handover", "reason": "worker_shutdown", "epoch": 2, "unstarted": ["c3"]},
        {"kind": "workspace_base", "commit": None},
        {
            "kind": "verifier_started",
            "child": "v",
            "purpose": "gate",
            "revision": 3,
            "candidate": 9,
            "triggers": ["files_changed:3"],
            "goal": None,
        },
        {
            "kind": "verifier_verdict",
            "child": "v",
            "purpose": "goal",
            "revision": 1,
            "goal": "job",
            "verdict": "FAIL",
            "reasons": ["c.py is empty"],
            "malformed": False,
            "child_state": "completed",
            "child_reason": "answer_accepted",
        },
        {"kind": "goal", "goal": "job", "from": "verifying", "to": "rejected", "reasons": ["x"]},
        {
            "kind": "context",
            "instructions": [
                {"path": "AGENTS.md", "text": "t", "size": 1, "sha256": "ab", "truncated": False}
            ],
            "missing": ["CONTRIBUTING.md"],
        },
        {"kind": "self_check", "turn": 5},
    ]
    assert {g["kind"] for g in good} == set(CONTROL_SHAPES)
    for data in good:
        assert parse_payload("control", data).as_json() == data
    assert parse_payload("control", {"kind": "future", "x": [1]}).as_json() == {
        "kind": "future",
        "x": [1],
    }


def test_the_terminal_payload_names_its_child_and_worktree_keys() -> None:
    data = {"state": "completed", "children_running": ["k1"], "commit": None, "branch": "b"}
    assert parse_payload("terminal", data).as_json() == data
    for bad in ({"children_running": "k1"}, {"commit": 7}, {"branch": ["b"]}):
        with pytest.raises(ValidationError):
            parse_payload("terminal", bad)
