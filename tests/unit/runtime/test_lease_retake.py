"""Losing the lease store is not losing the owner (DESIGN.md section 4).

A lease store that comes back empty (a Redis restart without persistence)
mid-tool: the live owner re-takes its lease with its own token, its tool
finishes, its result commits normally and the run completes -- with a
``lease``/``retaken`` event on record.  Only a real loss stops it: another
token holds the key, or the session's epoch moved on; the run's record says
which when the owner can still write it.  The real-process version (a private
``redis-server`` restarted mid-Bash) is ``tests/integration/test_lease_store_restart.py``.
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.core.recovery import lost_owner_text
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from tests.unit.runtime.owner_world import act_turn, world


def test_an_emptied_lease_store_mid_tool_is_retaken_and_the_run_completes(tmp_path: Path) -> None:
    w = world([act_turn("a1"), {"text": "Done."}], tmp_path)
    runner = w.runner()
    w.script.hooks["a1"] = w.restart_store
    # the tool runs until its owner holds the lease again (re-taken by the heartbeat)
    w.script.until["a1"] = lambda: w.leases.holder(w.session_id) is not None

    outcome = runner.run(w.session_id)

    assert outcome is SessionOutcome.FINISHED
    (run,) = w.ledger.runs_of(w.session_id)
    assert run.terminal_state is not None and run.terminal_state.value == "completed"
    result = w.result("a1")
    assert result.payload["status"] == ToolStatus.OK.value and not result.payload.get("synthetic")
    assert w.controls("lease") == [
        {"kind": "lease", "event": "retaken", "reason": "lease_store_empty", "epoch": 1}
    ]
    assert {e.epoch for e in w.events()[1:]} == {1}, "no other owner took over"
    assert not w.controls("recovery")
    assert w.script.executed == ["a1"]
    assert w.leases.holder(w.session_id) is None, "released at the end"


def test_another_token_on_the_key_stops_the_owner_and_the_record_says_so(tmp_path: Path) -> None:
    w = world([act_turn("a1"), {"text": "Done."}], tmp_path)
    runner = w.runner()

    def intruder_takes_it() -> None:
        w.restart_store()
        assert w.leases.acquire(w.session_id, "intruder", 60_000)

    w.script.hooks["a1"] = intruder_takes_it
    w.script.until["a1"] = lambda: False  # runs until it is asked to stop

    outcome = runner.run(w.session_id)

    assert outcome is SessionOutcome.LEASE_LOST
    assert w.controls("lease") == [
        {"kind": "lease", "event": "lost", "reason": "another_owner", "epoch": 1}
    ]
    assert not [e for e in w.events() if e.type is EventType.TOOL_RESULT], "no result committed"
    assert w.leases.holder(w.session_id) == "intruder", "the intruder's lease is untouched"

    # The next owner's recovery says why the call has no result (not "the worker was lost").
    assert w.leases.release(w.session_id, "intruder")
    assert w.runner().run(w.session_id) is SessionOutcome.FINISHED
    closed = w.result("a1")
    assert closed.payload["status"] == ToolStatus.INTERRUPTED.value
    assert closed.payload["content"] == lost_owner_text("another_owner")
    assert w.script.executed == ["a1"], "never run twice"


def test_a_bumped_epoch_found_on_retaking_stops_the_owner_without_a_write(tmp_path: Path) -> None:
    w = world([act_turn("a1"), {"text": "Done."}], tmp_path)
    runner = w.runner()
    written: list[int] = []

    def another_owner_came_and_went() -> None:
        w.restart_store()
        w.ledger.bump_epoch(w.session_id, at=w.clock.now())  # took over, then let go
        written.append(len(w.events()))

    w.script.hooks["a1"] = another_owner_came_and_went
    w.script.until["a1"] = lambda: False

    outcome = runner.run(w.session_id)

    assert outcome is SessionOutcome.LEASE_LOST
    assert len(w.events()) == written[0], "a fenced-out owner writes nothing, not even its loss"
    assert w.leases.holder(w.session_id) is None, "the key it re-took was given back"


def test_a_delivery_in_the_retake_window_leaves_the_live_owner_its_session(
    tmp_path: Path,
) -> None:
    """A re-dispatch (the sweeper after a broker reset) lands while the key is missing.

    With ``grace`` the delivery does not take a session whose owner never
    handed it back; the owner re-takes its key and finishes.  A follow-up
    that already waited (``grace=False``) or a handed-back session is taken.
    """
    w = world([act_turn("a1"), {"text": "Done."}], tmp_path)
    owner = w.runner()
    other: list[SessionOutcome] = []

    def restart_then_redispatch() -> None:
        w.restart_store()
        other.append(w.runner().run(w.session_id, grace=True))  # arrives before the re-take

    w.script.hooks["a1"] = restart_then_redispatch
    w.script.until["a1"] = lambda: w.leases.holder(w.session_id) is not None

    assert owner.run(w.session_id) is SessionOutcome.FINISHED
    assert other == [SessionOutcome.OWNER_MAY_BE_ALIVE]
    assert {e.epoch for e in w.events()[1:]} == {1}, "the other delivery took nothing"
    assert w.result("a1").payload["status"] == ToolStatus.OK.value


def test_grace_does_not_delay_a_handed_back_or_a_queued_session(tmp_path: Path) -> None:
    w = world([{"text": "Done."}], tmp_path)
    assert w.runner().run(w.session_id, grace=True) is SessionOutcome.FINISHED
    crashed = world([{"text": "Done."}], tmp_path / "b")
    crashed.ledger.bump_epoch(crashed.session_id, at=crashed.clock.now())  # owner vanished
    assert crashed.runner().run(crashed.session_id, grace=True) is (
        SessionOutcome.OWNER_MAY_BE_ALIVE
    )
    assert crashed.runner().run(crashed.session_id) is SessionOutcome.FINISHED  # waited already
