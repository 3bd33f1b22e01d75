"""Inbox messages as ledger events (DESIGN.md section 8).

Claimed messages become ``user_input`` events of the run, committed in the
same transaction that marks them claimed; the transcript shows them to the
model as user text at the next provider boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nahida_workers.core.events import Event, EventType
from nahida_workers.core.records import InboxMessage
from nahida_workers.core.state import RunState

__all__ = ["inbox_events"]


def inbox_events(
    state: RunState, messages: Sequence[InboxMessage], *, now: datetime
) -> tuple[Event, ...]:
    """One ``user_input`` event per message, in the order they were enqueued."""
    return tuple(
        Event(
            run_id=state.run_id,
            sequence=state.next_sequence + i,
            type=EventType.USER_INPUT,
            payload={
                "text": m.text,
                "source": "inbox",
                "message_id": m.message_id,
                "kind": m.kind.value,
            },
            created_at=now,
        )
        for i, m in enumerate(messages)
    )
