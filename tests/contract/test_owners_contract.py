"""The durable crash counter and the prompt artifact store, on every ledger (issue 10).

``bump_epoch`` settles the previous owner in the same commit: one that never
handed the session back (``close_owner``) counts as a crashed delivery unless
it made progress at its epoch -- a finished tool execution (a receipt that is
not ``interrupted``/``aborted``) or a seal.  Artifacts are stored whole,
addressed by sha256, written once.
"""

from __future__ import annotations

import hashlib
from typing import Any

from nahida_workers.core.events import ToolStatus
from tests.contract.ledger_world import at, make_world, receipt, terminal, tool_call, tool_result


def streak(world: Any) -> int:
    session = world.ledger.get_session(world.session_id)
    return int(session.crash_streak)


def test_owners_that_vanish_without_progress_are_counted(ledger: Any) -> None:
    w = make_world(ledger)
    w.bump()
    assert streak(w) == 0 and w.ledger.get_session(w.session_id).open_epoch == 1
    w.bump()  # owner 1 never closed: a crash
    w.bump()  # owner 2 too
    assert streak(w) == 2
    w.ledger.close_owner(w.session_id, w.epoch, at=at(20))  # owner 3 ends cleanly
    assert w.ledger.get_session(w.session_id).open_epoch is None
    w.bump()
    assert streak(w) == 2, "a clean hand-back is not a crash, and no progress resets nothing"


def test_a_finished_execution_resets_the_count(ledger: Any) -> None:
    w = make_world(ledger)
    w.bump()
    w.bump()
    assert streak(w) == 1
    w.append(tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1"))
    w.put(receipt(w.run_id, "c1"))
    w.bump()  # owner 2 crashed, but after a finished execution
    assert streak(w) == 0


def test_an_interrupted_receipt_is_no_progress(ledger: Any) -> None:
    w = make_world(ledger)
    w.bump()
    w.append(tool_call(w.run_id, 2, "c1"), tool_result(w.run_id, 3, "c1"))
    w.put(receipt(w.run_id, "c1").model_copy(update={"status": ToolStatus.INTERRUPTED}))
    w.bump()
    assert streak(w) == 1


def test_a_seal_is_progress_and_close_owner_of_a_superseded_owner_is_a_no_op(ledger: Any) -> None:
    w = make_world(ledger)
    w.bump()
    w.bump()
    old = w.epoch
    w.bump()
    assert streak(w) == 2
    w.ledger.close_owner(w.session_id, old, at=at(20))  # a paused owner waking up late
    assert w.ledger.get_session(w.session_id).open_epoch == w.epoch
    w.append(terminal(w.run_id, 2))
    w.ledger.close_owner(w.session_id, w.epoch, at=at(21))
    assert streak(w) == 0


def test_artifacts_are_stored_whole_and_written_once(ledger: Any) -> None:
    data = ("é" * 300_000).encode()
    digest = ledger.put_artifact(data, at=at(1))
    assert digest == hashlib.sha256(data).hexdigest()
    assert ledger.put_artifact(data, at=at(2)) == digest  # idempotent
    assert ledger.get_artifact(digest) == data
    assert ledger.get_artifact("0" * 64) is None
