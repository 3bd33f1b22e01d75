"""Dispatcher: idempotent creation, the transactional outbox, re-dispatch."""

from __future__ import annotations

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import FakeClock, ListTaskQueue, scripted_spec

SPEC = scripted_spec([{"text": "hi"}])


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest) -> object:
    if request.param == "memory":
        return MemoryLedger()
    return request.getfixturevalue(f"{request.param}_ledger")


def test_a_known_idempotency_key_returns_the_session_and_publishes_nothing(
    any_ledger: MemoryLedger,
) -> None:
    queue = ListTaskQueue()
    dispatcher = Dispatcher(any_ledger, queue, FakeClock())
    first, created = dispatcher.submit(SPEC, workspace="/w", idempotency_key="nightly:2026-01-01")
    again, created_again = dispatcher.submit(
        SPEC, workspace="/w", idempotency_key="nightly:2026-01-01"
    )
    assert created and not created_again
    assert again.session_id == first.session_id
    assert [sid for sid, _ in queue.published] == [first.session_id]
    assert len(any_ledger.sessions()) == 1
    assert len(any_ledger.runs_of(first.session_id)) == 1


def test_submit_writes_session_run_prompt_and_a_published_outbox_row(
    any_ledger: MemoryLedger,
) -> None:
    queue = ListTaskQueue()
    session, _ = Dispatcher(any_ledger, queue, FakeClock()).submit(SPEC, workspace="/w")
    assert session.status is SessionStatus.QUEUED and session.lease_epoch == 0
    (run,) = any_ledger.runs_of(session.session_id)
    (event,) = any_ledger.events(run.run_id)
    assert event.type is EventType.USER_INPUT and event.payload["text"] == SPEC.prompt
    assert any_ledger.pending_outbox() == []
    (_, task_id) = queue.published[0]
    assert task_id.startswith(f"session-{session.session_id}-")


def test_a_crash_between_commit_and_publish_is_repaired_by_the_outbox(
    any_ledger: MemoryLedger,
) -> None:
    queue = ListTaskQueue(fail=True)
    dispatcher = Dispatcher(any_ledger, queue, FakeClock())
    with pytest.raises(ConnectionError):
        dispatcher.submit(SPEC, workspace="/w")
    (pending,) = any_ledger.pending_outbox()  # committed, never published
    assert dispatcher.publish_pending() == 0  # broker still down: stays pending
    queue.fail = False
    assert dispatcher.publish_pending() == 1
    assert [sid for sid, _ in queue.published] == [pending.session_id]
    assert any_ledger.pending_outbox() == []
    assert dispatcher.publish_pending() == 0  # idempotent
