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
