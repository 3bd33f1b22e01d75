"""Priorities and per-group caps through the runner, the dispatcher and the sweeper.

In-memory ports: a delivery over its group's cap is deferred (the slot is
free at once, no message waits), the session that stops running releases the
next one and publishes it at its priority, a crash between the two is
repaired by the sweep, and the broker sees each session's priority.  The
same rules with real worker processes: ``tests/integration/test_control_plane.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.celery.config import broker_priority
from nahida_workers.core.capacity import admits, releasable
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import Admission
from nahida_workers.ledger.admission import admission_ledger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec

SPEC = scripted_spec([{"text": "done"}], tools=[])
GROUP = "batch:b"


def _world(cap: int | None) -> tuple[SessionRunner, Dispatcher, ListTaskQueue]:
    runner = memory_runner()
    queue = ListTaskQueue()
    dispatcher = Dispatcher(runner.ledger, queue, runner.clock)  # type: ignore[arg-type]
    runner.publish = dispatcher.publish
    dispatcher.set_cap(GROUP, cap)
    return runner, dispatcher, queue


def _submit(dispatcher: Dispatcher, n: int, *, priority: int | None = None) -> list[str]:
    ids = []
    for i in range(n):
        dispatcher.clock.advance(1)  # type: ignore[attr-defined]  # oldest first
        session, _ = dispatcher.submit(
            SPEC, workspace=f"/ws/{i}", admission_group=GROUP, priority=priority
        )
        ids.append(session.session_id)
    return ids


def test_the_pure_rules() -> None:
    assert admits(None, 100) and admits(0, 100) and admits(2, 1) and not admits(2, 2)
    assert releasable(2, running=1, released=0, deferred=5) == 1
    assert releasable(2, running=1, released=1, deferred=5) == 0
    assert releasable(None, running=9, released=9, deferred=5) == 5
    assert releasable(3, running=5, released=0, deferred=5) == 0  # a lowered cap


def test_a_delivery_over_the_cap_is_deferred_and_a_finished_one_releases_the_next() -> None:
    runner, dispatcher, queue = _world(cap=1)
    first, second, third = _submit(dispatcher, 3)
    # Hold the first one's slot: it is running (an owner admitted it, still at work).
    assert runner.ledger.get_session(first) is not None
    assert admission_ledger(runner.ledger).admit(first, at=runner.clock.now())
    published = len(queue.published)
    assert runner.run(second) is SessionOutcome.DEFERRED
    assert runner.run(third) is SessionOutcome.DEFERRED
    assert runner.leases.holder(second) is None, "a deferred delivery holds nothing"
    assert runner.ledger.get_session(second).admission is Admission.DEFERRED  # type: ignore[union-attr]
    assert len(queue.published) == published, "nothing is re-published while no slot frees"
    # The first finishes: its slot goes to the oldest deferred session, published at once.
    assert runner.run(first) is SessionOutcome.FINISHED
    assert [sid for sid, _ in queue.published[published:]] == [second]
    assert runner.run(second) is SessionOutcome.FINISHED
    assert [sid for sid, _ in queue.published[published:]] == [second, third]
    assert runner.run(third) is SessionOutcome.FINISHED
    assert {runner.ledger.get_session(s).status for s in (first, second, third)} == {  # type: ignore[union-attr]
        SessionStatus.DONE
    }


def test_without_a_cap_nothing_is_deferred() -> None:
    runner, dispatcher, _queue = _world(cap=None)
    sessions = _submit(dispatcher, 3)
    for sid in sessions:
        assert admission_ledger(runner.ledger).admit(sid, at=runner.clock.now())
    assert [runner.run(s) for s in sessions] == [SessionOutcome.FINISHED] * 3


def test_the_sweep_releases_what_a_crash_left_deferred() -> None:
    runner, dispatcher, queue = _world(cap=1)
    first, second = _submit(dispatcher, 2)
    port = admission_ledger(runner.ledger)
    assert port.admit(first, at=runner.clock.now())
    assert runner.run(second) is SessionOutcome.DEFERRED
    # The first one's owner sealed it and died before releasing the slot.
    with runner.ledger.transaction() as tx:
        runner.ledger.set_session_status(tx, first, SessionStatus.DONE, at=runner.clock.now())
    sweeper = Sweeper(runner.ledger, runner.leases, dispatcher, runner.clock)
    published = len(queue.published)
    runner.clock.advance(3600)  # type: ignore[attr-defined]
    report = sweeper.sweep()
    assert report.released == 1 and report.redispatched == ()
    assert [sid for sid, _ in queue.published[published:]] == [second]


def test_a_deferred_session_is_never_redispatched_by_the_sweep() -> None:
    runner, dispatcher, queue = _world(cap=1)
    first, second = _submit(dispatcher, 2)
    assert admission_ledger(runner.ledger).admit(first, at=runner.clock.now())
    runner.leases.acquire(first, "owner", 10**9)  # the first one is alive and owned
    assert runner.run(second) is SessionOutcome.DEFERRED
    runner.clock.advance(3600)  # type: ignore[attr-defined]
    published = len(queue.published)
    report = Sweeper(runner.ledger, runner.leases, dispatcher, runner.clock).sweep()
    assert report.redispatched == () and report.released == 0
    assert len(queue.published) == published


def test_the_broker_sees_each_session_priority_on_every_publish(tmp_path: Path) -> None:
    _runner, dispatcher, queue = _world(cap=None)
    (urgent,) = _submit(dispatcher, 1, priority=9)
    (plain,) = _submit(dispatcher, 1)
    dispatcher.redispatch(urgent)  # a re-publish reads the recorded priority
    sent = {task: queue.priorities[task] for _sid, task in queue.published}
    by_session = [(sid, sent[task]) for sid, task in queue.published]
    assert by_session == [(urgent, 9), (plain, None), (urgent, 9)]


@pytest.mark.parametrize(
    ("priority", "url", "expected"),
    [
        (9, "redis://h/0", 0),  # kombu's Redis transport pops step 0 first
        (0, "redis://h/0", 9),
        (None, "rediss://h/0", 4),  # the default, 5
        (12, "redis://h/0", 0),  # clamped
        (9, "memory://", 9),
    ],
)
def test_the_broker_priority_scale(priority: int | None, url: str, expected: int) -> None:
    assert broker_priority(priority, url) == expected
