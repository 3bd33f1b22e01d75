"""Poison sessions end (issue 10 item 2): counted in the ledger, sealed by the next owner.

The real thing -- worker processes killed each time they take the session --
is ``tests/integration/test_redelivery.py``; here the dead owners are
simulated with ``bump_epoch`` calls that never hand the session back.
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.core.events import EventType
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec


def _session(turns: list[dict[str, object]], crashes: int) -> tuple[SessionRunner, str]:
    runner = memory_runner()
    spec = scripted_spec(turns, tools=("LS",))
    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        spec, workspace="."
    )
    for _ in range(crashes):  # owners that took the session and vanished
        runner.ledger.bump_epoch(session.session_id, at=runner.clock.now())
    return runner, session.session_id


def test_three_crashed_owners_in_a_row_end_the_run_poison_session(tmp_path: Path) -> None:
    runner, sid = _session([{"text": "never asked"}], crashes=3)
    outcome = runner.run(sid)
    assert outcome.value == "finished"
    (run,) = runner.ledger.runs_of(sid)
    assert (run.terminal_state.value, run.terminal_reason.value) == ("failed", "poison_session")
    events = runner.ledger.events(run.run_id)
    assert not [e for e in events if e.type is EventType.ASSISTANT_OUTPUT], "no provider call"
    assert runner.ledger.get_session(sid).crash_streak == 0


def test_two_crashes_are_not_enough_and_clean_deliveries_never_count(tmp_path: Path) -> None:
    runner, sid = _session([{"text": "Fine."}], crashes=2)
    runner.run(sid)
    (run,) = runner.ledger.runs_of(sid)
    assert run.terminal_state.value == "completed"


def test_the_bound_is_a_setting(tmp_path: Path) -> None:
    runner, sid = _session([{"text": "Fine."}], crashes=1)
    runner.poison_after_crashes = 1
    runner.run(sid)
    (run,) = runner.ledger.runs_of(sid)
    assert run.terminal_reason.value == "poison_session"
