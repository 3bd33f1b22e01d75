"""Concurrent re-dispatches of one session share publishes (nahida_workers/api/coalesce.py).

The rule under test: every caller returns only after a publish that began
after it called -- so no steering message is left without a task published
after its commit -- while a burst of callers costs a few publishes, not one each.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from nahida_workers.api.coalesce import CoalescingDispatcher
from nahida_workers.core.events import SessionStatus
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import FakeClock, scripted_spec
from nahida_workers.testing.fleet import wait_for


@dataclass
class GatedQueue:
    """A broker whose publishes wait for the test to open a gate; records start times."""

    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    started: list[int] = field(default_factory=list)  # the tick each publish began at
    tick: list[int] = field(default_factory=lambda: [0])
    fail: bool = False

    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        self.started.append(self.tick[0])
        self.entered.release()
        self.gate.wait(10)
        if self.fail:
            raise ConnectionError("broker down (test)")


def _world() -> tuple[CoalescingDispatcher, GatedQueue, str]:
    ledger, clock, queue = MemoryLedger(), FakeClock(), GatedQueue()
    plain = Dispatcher(ledger, queue, clock)
    queue.gate.set()
    session, _ = plain.submit(scripted_spec([{"text": "hi"}]), workspace=".")
    queue.gate.clear()
    queue.started.clear()
    return CoalescingDispatcher.of(plain), queue, session.session_id


def test_callers_during_a_publish_share_one_later_publish() -> None:
    dispatcher, queue, sid = _world()
    calls: list[tuple[int, int]] = []  # (tick at call, index of the publish that served it)
    lock = threading.Lock()

    def call() -> None:
        with lock:
            at = queue.tick[0]
        dispatcher.redispatch(sid)
        calls.append((at, len(queue.started)))

    first = threading.Thread(target=call)
    first.start()
    assert queue.entered.acquire(timeout=10)  # publish 1 is under way
    queue.tick[0] = 1  # every later caller calls after publish 1 began
    others = [threading.Thread(target=call) for _ in range(20)]
    for thread in others:
        thread.start()
    wait_for(
        lambda: (
            (s := dispatcher._sessions.get(sid)) is not None
            and s.pending is not None
            and s.pending.callers == 20
        ),
        timeout=10,
        what="the 20 late callers to join the next round",
    )
    queue.gate.set()
    for thread in [first, *others]:
        thread.join(timeout=10)
    assert len(calls) == 21
    assert len(queue.started) == 2, queue.started  # 21 callers, 2 publishes
    assert queue.started[1] == 1, "the shared publish began after the late callers called"
    assert len(dispatcher._sessions) == 0  # nothing left behind


def test_every_caller_of_a_failed_round_sees_the_failure() -> None:
    dispatcher, queue, sid = _world()
    queue.fail = True
    errors: list[BaseException] = []

    def call() -> None:
        try:
            dispatcher.redispatch(sid)
        except ConnectionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(5)]
    threads[0].start()
    assert queue.entered.acquire(timeout=10)
    for thread in threads[1:]:
        thread.start()
    wait_for(
        lambda: (
            (s := dispatcher._sessions.get(sid)) is not None
            and s.pending is not None
            and s.pending.callers == 4
        ),
        timeout=10,
        what="the 4 late callers to join the next round",
    )
    queue.gate.set()
    for thread in threads:
        thread.join(timeout=10)
    assert len(errors) == 5  # nobody reports a delivery that did not happen
    pending = dispatcher.ledger.pending_outbox()
    assert len(pending) == len(queue.started) == 2  # the sweeper publishes them later


def test_a_lone_call_publishes_at_once_and_the_sweepers_calls_are_not_coalesced() -> None:
    dispatcher, queue, sid = _world()
    queue.gate.set()
    dispatcher.redispatch(sid)
    dispatcher.redispatch(sid, touch_status=SessionStatus.QUEUED)
    assert len(queue.started) == 2


@pytest.mark.parametrize("sessions", [1, 3])
def test_many_threads_on_a_few_sessions_all_return(sessions: int) -> None:
    dispatcher, queue, sid = _world()
    queue.gate.set()
    ids = [sid] + [
        Dispatcher(dispatcher.ledger, queue, dispatcher.clock)
        .submit(scripted_spec([{"text": "x"}]), workspace=".")[0]
        .session_id
        for _ in range(sessions - 1)
    ]
    queue.started.clear()
    done = []
    threads = [
        threading.Thread(
            target=lambda i=i: (dispatcher.redispatch(ids[i % sessions]), done.append(i))
        )
        for i in range(60)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(done) == 60 and 1 <= len(queue.started) <= 60
    assert len(dispatcher._sessions) == 0
