"""The commit points of a session owner (DESIGN.md section 3 steps 3 and 5, and the seal).

Every transaction is fenced with the epoch bumped when the lease was taken,
and a short ledger outage is ridden out without applying a commit twice
(``runtime/outage.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from nahida_workers import metrics
from nahida_workers.core.events import (
    Event,
    ExecutionReceipt,
)
from nahida_workers.core.loop import (
    Finish,
    terminal_event,
)
from nahida_workers.core.receipts import missing_receipts
from nahida_workers.core.records import RunRecord
from nahida_workers.core.state import RunState
from nahida_workers.ports import Clock, Fence, Ledger
from nahida_workers.runtime.heartbeat import Heartbeat
from nahida_workers.runtime.observe import Observer
from nahida_workers.runtime.outage import commit_through_outage

log = logging.getLogger(__name__)


class CommitPoints:
    """Fenced commits of one owned session; the run state learns only what committed.

    Attributes:
        ledger / clock: the ports.
        fence: the session id and the epoch this owner bumped (section 4).
        heartbeat: the lease heartbeat; checked before every commit attempt.
        outage_s: how long a commit is retried through a ledger outage, seconds.
        observer: told what committed (set once the run is driven).
    """

    def __init__(
        self,
        ledger: Ledger[Any],
        clock: Clock,
        fence: Fence,
        heartbeat: Heartbeat,
        *,
        outage_s: float,
        cancel_seen: bool,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.fence = fence
        self.heartbeat = heartbeat
        self.outage_s = outage_s
        self.observer: Observer | None = None
        self._cancel_seen = cancel_seen
        self._inbox_pending = 0

    def commit(
        self,
        state: RunState,
        events: Sequence[Event],
        receipts: Sequence[ExecutionReceipt] = (),
        *,
        claims: Sequence[str] = (),
    ) -> None:
        """One fenced transaction; the state learns the events only after commit.

        ``claims``: inbox message ids the events commit as user input.  A
        ledger outage is ridden out for ``ledger_outage_s`` (an attempt cut off
        after it landed is not repeated: ``runtime/outage.py``).  A result
        without a receipt (a call recovery closed as interrupted, one refused
        by a bound) is committed with a synthetic one (``core/receipts.py``).

        Raises:
            LeaseLostError / StaleEpochError: this owner lost the session.
            LedgerIntegrityError: the ledger refused the write.
            LedgerUnavailableError: the outage outlasted ``ledger_outage_s``.
        """
        self.heartbeat.check()
        receipts = [
            *receipts,
            *missing_receipts(state, events, receipts, now=self.clock.now()),
        ]

        def write() -> Any:
            with self.ledger.transaction(fence=self.fence, run_id=state.run_id) as tx:
                self.ledger.append(tx, events, receipts)
                self.ledger.claim_inbox(tx, state.run_id, claims, at=self.clock.now())
            return tx

        started = self.clock.monotonic()
        tx = commit_through_outage(
            write,
            landed=lambda: bool(events) and self._landed(state.run_id, events[0]),
            within_s=self.outage_s,
            before_retry=self.heartbeat.check,
        )
        metrics.observe_commit(self.clock.monotonic() - started, events, receipts)
        if tx is not None:
            # Both are read under the fence's row lock, so they are free and fresh.
            self._cancel_seen = tx.cancel_requested
            self._inbox_pending = tx.pending_inbox
        else:
            self._inbox_pending = max(self._inbox_pending, 1)  # unknown: look at the boundary
        if self.observer is not None:
            self.observer.committed(events)
        for event in events:
            state.apply(event)
        for receipt in receipts:
            state.apply_receipt(receipt)

    def _landed(self, run_id: str, first: Event) -> bool:
        """Whether a commit beginning with ``first`` is in the ledger, written by us.

        A commit point is one transaction, so its first event stands for all
        of it; the epoch tells our write from anyone else's.
        """
        return any(
            e.sequence == first.sequence
            and e.type is first.type
            and e.call_id == first.call_id
            and e.epoch == self.fence.epoch
            for e in self.ledger.events(run_id)
        )

    def seal(
        self, state: RunState, run: RunRecord, finish: Finish, *, within_s: float | None = None
    ) -> None:
        """Terminal event + run row + inbox acknowledgement + session status, one transaction.

        ``within_s``: how long to ride out a ledger outage (default ``outage_s``).

        Raises:
            LedgerUnavailableError: the outage outlasted ``within_s``.
        """
        now = self.clock.now()
        event = terminal_event(state, finish, now=now)

        def write() -> None:
            with self.ledger.transaction(fence=self.fence, run_id=run.run_id) as tx:
                self.ledger.seal_run(
                    tx,
                    event,
                    state=finish.state,
                    reason=finish.reason,
                    failure_code=finish.failure_code,
                    ended_at=now,
                )

        started = self.clock.monotonic()
        commit_through_outage(
            write,
            landed=lambda: self._landed(run.run_id, event),
            within_s=self.outage_s if within_s is None else within_s,
            before_retry=self.heartbeat.check,
        )
        metrics.observe_commit(self.clock.monotonic() - started, [event])
        state.apply(event)
        log.info("run %s sealed: %s/%s", run.run_id, finish.state.value, finish.reason.value)
        if self.observer is not None:
            self.observer.sealed(state, finish)
