"""The ledger does not walk a payload the event model just cleaned (issue 15 item 1).

``Event`` cleans a plain-mapping payload once as it is built
(``core/values.clean_json``) and marks the payload model; ``storable_events``
takes such an event as it is.  A payload model built any other way is still
checked and cleaned, so what is stored is the same on every backend.
"""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.core.event_payloads import trusted_payload
from nahida_workers.core.events import Event, EventType
from nahida_workers.ledger import rules


def test_an_event_built_from_a_mapping_is_stored_without_a_second_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    event = Event(run_id="r", sequence=1, type=EventType.USER_INPUT, payload={"text": "a\x00b"})
    assert event.payload["text"] == "a\ufffdb"
    walked: list[Any] = []
    monkeypatch.setattr(rules, "clean_json", lambda v: walked.append(v) or v)
    (stored,) = rules.storable_events([event])
    assert stored is event and not walked


def test_a_payload_model_built_elsewhere_is_still_checked_and_cleaned() -> None:
    dirty = trusted_payload("user_input", {"text": "x\x00y"})  # the contract broken
    event = Event(run_id="r", sequence=1, type=EventType.USER_INPUT, payload=dirty)
    (stored,) = rules.storable_events([event])
    assert stored is not event and stored.payload["text"] == "x\ufffdy"


def test_a_session_row_read_back_is_not_cleaned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cancel poll reads the session row each second of a batch: its config
    (the whole job, a scripted provider's turns included) was cleaned when it
    was written and is not walked again on every read."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from nahida_workers.core import records
    from nahida_workers.ledger.sql_base import session_row

    now = datetime(2026, 1, 1, tzinfo=UTC)
    row = SimpleNamespace(
        session_id="s",
        parent_id=None,
        batch_id=None,
        workspace="/w",
        status="running",
        lease_epoch=2,
        config_json={"prompt": "p", "turns": [{"text": "t"}] * 50},
        idempotency_key=None,
        created_at=now,
        updated_at=now,
        cancel_requested_at=None,
        open_epoch=None,
        crash_streak=0,
        priority=None,
        admission_group=None,
        admission=None,
    )
    walked: list[Any] = []
    monkeypatch.setattr(records, "clean_json", lambda v: walked.append(v) or v)
    session = session_row(row)
    assert session.config == row.config_json and session.lease_epoch == 2 and not walked
    records.SessionRecord(
        session_id="s2", workspace="/w", config={"prompt": "p"}, created_at=now, updated_at=now
    )
    assert walked, "a record built by this process is still cleaned"


def test_an_event_takes_its_payload_model_without_reading_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Event.payload`` is made a model before field validation; validating the
    union of payload models again read every key once per member tried."""
    from nahida_workers.core.event_payloads import PayloadModel

    payload = trusted_payload("tool_result", {"call_id": "c1", "status": "ok", "content": "x"})
    reads: list[str] = []
    real = PayloadModel.__getitem__

    def counted(self: PayloadModel, key: str) -> Any:
        reads.append(key)
        return real(self, key)

    monkeypatch.setattr(PayloadModel, "__getitem__", counted)
    event = Event(run_id="r", sequence=2, type=EventType.TOOL_RESULT, payload=payload, call_id="c1")
    assert event.payload is payload and reads == []
