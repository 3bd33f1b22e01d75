"""Children of a cancelled line are born cancelled (DESIGN.md section 8).

A turn can answer after its session -- or an ancestor -- was cancelled: the
owner learns of a cancel only at its next boundary.  The spawn therefore
reads the line's cancel flags in the transaction that commits the turn's
Task calls (:func:`line_cancelled`, the rule is
``core.facts.ancestor_cancelled``); in a cancelled line the child is written
already sealed ``cancelled`` with no outbox row (:func:`born_cancelled`):
it is never published and never calls its provider.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nahida_workers.core.events import Event, ReasonCode, TerminalState
from nahida_workers.core.facts import Node, ancestor_cancelled
from nahida_workers.core.lineage import ChildLimits, ChildLink, SpawnOutcome
from nahida_workers.core.loop import Finish, final_text_for, terminal_event
from nahida_workers.core.records import RunRecord, SessionRecord
from nahida_workers.core.state import RunState
from nahida_workers.ledger.control import control_ledger
from nahida_workers.ports import ChildLedger, Ledger

__all__ = ["CANCELLED_REFUSAL", "born_cancelled", "line_cancelled"]

#: What a resume in a cancelled line is told (the session stops at its next boundary).
CANCELLED_REFUSAL = "Task: not started: this session (or an ancestor) was cancelled"


def line_cancelled(
    ledger: Ledger[Any], tx: Any, session_id: str, link: ChildLink, now: datetime
) -> bool:
    """Whether ``session_id`` or an ancestor it follows is cancelled, read in ``tx``.

    ``link``: the session's place in its tree (its ``ancestors``, root first).
    When only an ancestor is cancelled, the session's own cancel flag is set
    too (under its fence, in ``tx``): it stops at its next boundary, its open
    calls closed ``cancelled``.
    """
    ancestors = [str(a) for a in link.lineage.get("ancestors", [])]
    chain_ids = [session_id, *reversed(ancestors)]
    control = control_ledger(ledger)
    flags = control.cancel_flags(tx, chain_ids)
    chain = [Node(sid, None, cancel_follows=flags[sid][1]) for sid in chain_ids if sid in flags]
    own = flags.get(session_id, (False, True))[0]
    cancelled = {sid: flag for sid, (flag, _follows) in flags.items()}
    if not ancestor_cancelled(own, chain, cancelled):
        return False
    if not own:
        control.flag_cancel(tx, session_id, at=now)
    return True


def born_cancelled(
    ledger: Ledger[Any],
    children: ChildLedger[Any],
    tx: Any,
    rows: tuple[SessionRecord, ChildLink, RunRecord, Event],
    limits: ChildLimits,
    now: datetime,
) -> SpawnOutcome:
    """Write a child sealed ``cancelled`` at birth: no outbox row, no provider call.

    ``rows``: the child's session, lineage, first run and prompt.  The
    child's seal is fenced like any (its epoch bumped in ``tx``); the
    transaction's fence then goes back to the spawning session's own.
    Returns the spawn's outcome (a refusal by a child limit writes nothing).
    """
    session, link, run, prompt = rows
    outcome = children.spawn_child(tx, session, link, run, prompt, None, limits)
    if outcome is not SpawnOutcome.CREATED:
        return outcome
    own = tx.fence
    control_ledger(ledger).fence_unowned(tx, session.session_id, lease_free=True, at=now)
    state = RunState.from_ledger(run.run_id, [prompt])
    cancelled, reason = TerminalState.CANCELLED, ReasonCode.CANCELLED
    finish = Finish(cancelled, reason, final_text_for(cancelled, reason))
    event = terminal_event(state, finish, now=now)
    event = event.model_copy(update={"payload": {**event.payload, "decided_by": "spawn"}})
    ledger.seal_run(
        tx, event, state=finish.state, reason=finish.reason, failure_code=None, ended_at=now
    )
    if own is not None:
        ledger.lock_session(tx, own.session_id, own.epoch)
    return outcome
