"""Durable timers fired by beat's sweep, with no worker slot (DESIGN.md section 8).

A parked session's deadlines are ``session_timers`` rows written in the
park's transaction (``CommitPoints.park``).  Each sweep
(``celery/maintenance.py``, run in beat by ``LedgerScheduler``) fires the
due ones through :class:`TimerFirer`:

* a ``budget`` timer of a session no worker holds, whose run is still the
  one it bounded, seals that run ``incomplete/budget_exhausted``; in the same
  transaction its children are ended by ``core.facts.children_to_cancel``
  (foreground ones cancelled with their subtrees; a background child follows
  its ``parent_close``) and a parent waiting on the session is woken;
* a session a worker holds is left to its owner (its loop enforces its own
  budget); the timer is recorded ``owned`` -- a later park re-arms it;
* a session or run that ended: ``stale``.

Firing is idempotent: the timer's ``fired_at`` compare-and-set is the last
write of the firing's transaction, and a firing that loses it (two beats)
rolls back whole.  A worker that takes a sealed session later finds it
``done`` (the fence's epoch bump).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nahida_workers.core.events import ReasonCode, TerminalState
from nahida_workers.core.facts import (
    Node,
    Timer,
    TimerAction,
    TimerKind,
    children_to_cancel,
    fire_action,
    may_seal,
    subtree_order,
)
from nahida_workers.core.loop import Finish, final_text_for
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.control import control_ledger
from nahida_workers.runtime.control.cancel import Canceller, Raced, node_of, read_tree
from nahida_workers.runtime.control.seal import open_run_of

__all__ = ["TimerFirer", "budget_finish"]

log = logging.getLogger(__name__)


class _Lost(Exception):
    """Another beat fired the timer first: roll this firing back."""


def budget_finish() -> Finish:
    """``incomplete/budget_exhausted`` with the runtime's own final text."""
    state, reason = TerminalState.INCOMPLETE, ReasonCode.BUDGET_EXHAUSTED
    return Finish(state, reason, final_text_for(state, reason))


@dataclass
class TimerFirer:
    """Fires due timers (see the module doc).

    Attributes:
        canceller: seals and flags sessions (its ledger, leases, clock and publisher).
    """

    canceller: Canceller

    def fire_due(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """Fire up to ``limit`` due timers; ``(timer id, outcome)`` of each one fired now.

        A timer whose firing fails (the ledger, a race with a worker) stays
        armed for the next sweep; the error is logged.
        """
        ledger = self.canceller.ledger
        now = self.canceller.clock.now()
        fired: list[tuple[str, str]] = []
        for timer in control_ledger(ledger).due_timers(now=now, limit=limit):
            try:
                outcome = self.fire(timer)
            except Raced:
                log.info(
                    "timer %s: session %s taken by a worker; next sweep",
                    timer.timer_id,
                    timer.session_id,
                )
                continue
            except Exception:
                log.exception(
                    "timer %s of session %s: firing failed", timer.timer_id, timer.session_id
                )
                continue
            if outcome is not None:
                fired.append((timer.timer_id, outcome))
        return fired

    def fire(self, timer: Timer) -> str | None:
        """Fire one timer now; its outcome, or None when another firing won.

        Raises:
            Raced: the session was sealable when read, then a worker took it
                (nothing written; the next sweep decides again).
        """
        c = self.canceller
        ledger = c.ledger
        control = control_ledger(ledger)
        now = c.clock.now()
        session = ledger.get_session(timer.session_id)
        run = open_run_of(ledger, timer.session_id) if session is not None else None
        free = c.leases.holder(timer.session_id) is None
        sealable = session is not None and may_seal(
            session.status, session.open_epoch, lease_free=free
        )
        open_run = run.run_id if run is not None else None
        action = fire_action(timer, open_run=open_run, sealable=sealable, now=now)
        if action is None:
            return None
        if timer.kind != TimerKind.BUDGET.value:  # a reserved kind: nothing decides it yet
            action = TimerAction.STALE

        def cas(tx: Any) -> None:
            assert action is not None
            if not control.fire_timer(tx, timer.timer_id, outcome=action.value, at=now):
                raise _Lost(timer.timer_id)

        try:
            if action is not TimerAction.SEAL:
                with ledger.transaction() as tx:
                    cas(tx)
                return action.value
            nodes, rows = read_tree(ledger, timer.session_id)
            order = self._budget_order(timer.session_id, nodes)
            report = c.apply(
                order,
                nodes,
                rows,
                finishes={timer.session_id: budget_finish()},
                decided_by=f"timer:{timer.kind}",
                must_seal=timer.session_id,
                then=cas,
            )
        except _Lost:
            return None
        log.warning(
            "session %s: wall-clock budget passed while it waited; sealed "
            "incomplete/budget_exhausted (children cancelled %d, flagged %d)",
            timer.session_id,
            len(report.sealed) - 1,
            len(report.flagged),
        )
        return action.value

    def _budget_order(self, session_id: str, nodes: list[Node]) -> list[str]:
        """Children the budget ends (with their subtrees), deepest first, then the session."""
        links = child_ledger(self.canceller.ledger)
        direct = []
        for node in nodes:
            if node.parent_id == session_id:
                link = links.link(node.session_id)
                lineage = link.lineage if link is not None else {}
                session = self.canceller.ledger.get_session(node.session_id)
                direct.append(node_of(session, lineage) if session is not None else node)
        order: list[str] = []
        for child in children_to_cancel(direct):
            order.extend(s for s in subtree_order(child, nodes) if s not in order)
        return [*order, session_id]
