"""The sweeper: outbox, ownerless sessions, a lost broker, stuck sessions (issue 6 item 4)."""

from __future__ import annotations

from pathlib import Path

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher, PublishDeferred, RecordOnlyQueue
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec

SPEC = scripted_spec(
    [{"text": "x", "tool_calls": [{"id": "c", "name": "LS", "arguments": {}}]}, {"text": "done"}]
)


def _world() -> tuple[object, Dispatcher, ListTaskQueue]:
    runner = memory_runner()
    queue = ListTaskQueue()
    return runner, Dispatcher(runner.ledger, queue, runner.clock), queue


def test_a_lost_broker_gets_every_ownerless_session_dispatched_again() -> None:
    runner, dispatcher, queue = _world()
    queued, _ = dispatcher.submit(SPEC, workspace=".")
    published = len(queue.published)
    resets = iter([True, False])
    sweeper = Sweeper(
        runner.ledger,
        runner.leases,
        dispatcher,
        runner.clock,  # type: ignore[attr-defined]
        broker_reset=lambda: next(resets),
    )
    report = sweeper.sweep()
    assert report.broker_reset and report.redispatched == (queued.session_id,)
    assert len(queue.published) == published + 1
    assert sweeper.sweep().redispatched == ()  # a queued session is trusted to the broker a while


def test_a_sweep_publishes_the_sessions_recorded_while_the_broker_was_down() -> None:
    """Batches and schedule fires record the rest with RecordOnlyQueue; the sweep sends them."""
    runner, dispatcher, queue = _world()
    recorder = Dispatcher(runner.ledger, RecordOnlyQueue(), runner.clock)  # type: ignore[attr-defined]
    recorded = []
    for workspace in ("/a", "/b"):
        try:
            recorder.submit(SPEC, workspace=workspace)
        except PublishDeferred as deferred:
            recorded.append(str(deferred))
    assert len(recorded) == 2 and queue.published == []
    sweeper = Sweeper(runner.ledger, runner.leases, dispatcher, runner.clock)  # type: ignore[attr-defined]
    queue.fail = True
    assert sweeper.sweep().outbox_published == 0  # still down: the rows stay pending
    queue.fail = False
    assert sweeper.sweep().outbox_published == 2
    assert [sid for sid, _task in queue.published] == recorded
    assert sweeper.sweep().outbox_published == 0  # once


def test_a_session_stuck_with_no_owner_is_settled_failed_abandoned(tmp_path: Path) -> None:
    runner, dispatcher, _queue = _world()
    session, _ = dispatcher.submit(SPEC, workspace=str(tmp_path))
    run = runner.ledger.runs_of(session.session_id)[0]  # type: ignore[attr-defined]
    # An owner took it and vanished (its crash left the session running, unowned).
    runner.ledger.bump_epoch(session.session_id, at=runner.clock.now())  # type: ignore[attr-defined]
    runner.clock.advance(7200)  # type: ignore[attr-defined]
    sweeper = Sweeper(
        runner.ledger,
        runner.leases,
        dispatcher,
        runner.clock,  # type: ignore[attr-defined]
        settle_after_s=3600,
        runner=runner,
    )  # type: ignore[arg-type]
    report = sweeper.sweep()
    assert report.settled == (session.session_id,)
    sealed = runner.ledger.get_run(run.run_id)  # type: ignore[attr-defined]
    assert (
        sealed.terminal_state.value,
        sealed.terminal_reason.value,
        sealed.failure_code.value,
    ) == ("failed", "abandoned", "abandoned")
    events = runner.ledger.events(run.run_id)  # type: ignore[attr-defined]
    assert [e.type for e in events][-1] is EventType.TERMINAL
    assert runner.ledger.get_session(session.session_id).status is SessionStatus.DONE  # type: ignore[attr-defined]
    assert sweeper.sweep().settled == ()


def test_a_session_with_recent_progress_is_not_settled(tmp_path: Path) -> None:
    runner, dispatcher, _queue = _world()
    dispatcher.submit(SPEC, workspace=str(tmp_path))
    runner.clock.advance(60)  # type: ignore[attr-defined]
    sweeper = Sweeper(
        runner.ledger,
        runner.leases,
        dispatcher,
        runner.clock,  # type: ignore[attr-defined]
        settle_after_s=3600,
        runner=runner,
    )  # type: ignore[arg-type]
    assert sweeper.sweep().settled == ()


def test_a_queued_session_whose_message_was_lost_is_dispatched_again_once_per_bound() -> None:
    """bench/chaos.py found it: a worker SIGKILLed between taking the message off the
    queue and recording it unacknowledged loses it; the outbox says published."""
    runner, dispatcher, queue = _world()
    queued, _ = dispatcher.submit(SPEC, workspace=".")
    queue.published.clear()  # the message is gone; nothing ran
    sweeper = Sweeper(
        runner.ledger,
        runner.leases,
        dispatcher,
        runner.clock,  # type: ignore[attr-defined]
        redispatch_after_s=60,
        redispatch_queued_after_s=300,
    )
    runner.clock.advance(299)  # type: ignore[attr-defined]
    assert sweeper.sweep().redispatched == ()  # it may still wait behind a backlog
    runner.clock.advance(2)  # type: ignore[attr-defined]
    assert sweeper.sweep().redispatched == (queued.session_id,)
    assert len(queue.published) == 1
    assert sweeper.sweep().redispatched == ()  # touched: the next try is one bound later
    runner.clock.advance(301)  # type: ignore[attr-defined]
    assert sweeper.sweep().redispatched == (queued.session_id,)
    runner.run(queued.session_id)  # type: ignore[attr-defined]
    runner.clock.advance(10_000)  # type: ignore[attr-defined]
    assert sweeper.sweep().redispatched == ()  # done sessions are never re-dispatched


def test_the_broker_run_id_first_seen_is_not_a_reset_a_changed_one_is() -> None:
    from nahida_workers.celery.maintenance import run_id_changed
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.testing import FakeClock

    ledger, at = MemoryLedger(), FakeClock().now()
    assert not run_id_changed(ledger, "redis-a", at=at)  # a new fleet: nothing was lost
    assert not run_id_changed(ledger, "redis-a", at=at)
    assert run_id_changed(ledger, "redis-b", at=at)  # restarted without persistence
    assert not run_id_changed(ledger, "redis-b", at=at)


def test_a_session_no_owner_ever_took_is_waiting_not_stuck(tmp_path: Path) -> None:
    """Two hours behind a backlog (or a cap) is not a crash loop: never settled."""
    runner, dispatcher, _queue = _world()
    session, _ = dispatcher.submit(SPEC, workspace=str(tmp_path))
    runner.clock.advance(7200)  # type: ignore[attr-defined]
    sweeper = Sweeper(
        runner.ledger,
        runner.leases,
        dispatcher,
        runner.clock,  # type: ignore[attr-defined]
        settle_after_s=3600,
        runner=runner,
    )  # type: ignore[arg-type]
    assert sweeper.sweep().settled == ()
    assert runner.ledger.get_session(session.session_id).status is SessionStatus.QUEUED  # type: ignore[attr-defined]


def test_a_session_sealed_after_the_sweep_read_it_stays_done() -> None:
    """The sweep reads its candidates first and re-dispatches them one by one (a slow sweep
    after a broker reset took 19 s in the mixed chaos run): a session sealed ``done`` in
    between must not be turned back to ``running`` -- a parent's wake counts it done."""
    runner, dispatcher, queue = _world()
    session, _ = dispatcher.submit(SPEC, workspace=".")
    stale = session.model_copy(update={"status": SessionStatus.RUNNING})
    runner.run(session.session_id)  # type: ignore[attr-defined]
    ledger = runner.ledger  # type: ignore[attr-defined]
    assert ledger.get_session(session.session_id).status is SessionStatus.DONE
    read = ledger.sessions
    ledger.sessions = lambda **kw: (
        [stale] if kw.get("statuses") == [SessionStatus.RUNNING] else read(**kw)
    )
    sweeper = Sweeper(ledger, runner.leases, dispatcher, runner.clock, broker_reset=lambda: True)  # type: ignore[attr-defined]
    published = len(queue.published)
    assert sweeper.sweep().redispatched == (session.session_id,)
    assert len(queue.published) == published + 1  # the message goes out: the delivery finds it done
    assert read(statuses=[SessionStatus.DONE])[0].session_id == session.session_id
