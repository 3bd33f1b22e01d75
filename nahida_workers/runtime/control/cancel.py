"""A cancel is a ledger fact that takes effect at once (DESIGN.md section 8).

:meth:`Canceller.cancel` covers the session and its whole subtree (children
whose ``parent_close`` is ``cancel``, theirs, ...) in ONE transaction,
deepest first (the ledger's lock order: child before ancestor):

* a session no worker holds (``queued``, parked ``waiting``, waiting out a
  retry, deferred by its admission cap) is sealed ``cancelled`` there and
  then, fenced like every write (``ControlLedger.fence_unowned`` bumps its
  epoch: a worker that takes it later finds it sealed and writes nothing);
  its completion is posted to its parent, waking a parent parked on it;
* a session a live worker holds gets the cancel flag: its owner seals it at
  its next boundary (or its next cancel poll, ``CANCEL_POLL_S``), as before.

After the commit: woken parents are published, a flagged session with no
lease holder is re-dispatched (its owner may be gone), and the admission
slot of a sealed ``running`` session is released.  No step waits for a
worker slot.  Every cancel path goes through here: ``nahida cancel``, the
API's cancel route, a schedule's ``cancel_previous`` (all via
``Inbox.cancel``) and a parent's seal closing its children
(``runtime/children/close.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.facts import Node, subtree_order
from nahida_workers.core.loop import Finish
from nahida_workers.core.records import InboxLimits, OutboxRecord, SessionRecord
from nahida_workers.errors import LedgerUnavailableError, NotFoundError, UserError
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.control import control_ledger
from nahida_workers.ports import Clock, LeaseStore
from nahida_workers.runtime.control.seal import Unowned, cancelled_finish, seal_unowned
from nahida_workers.runtime.dispatch.admission import free_slot
from nahida_workers.runtime.observe.channel import EventSink, NullSink

__all__ = [
    "CancelReport",
    "Canceller",
    "Publisher",
    "Raced",
    "cancel_closed",
    "node_of",
    "read_tree",
]

log = logging.getLogger(__name__)

#: Attempts of one cancel's transaction (a deadlock with an owner's seal is retried).
WRITE_ATTEMPTS = 3


class Publisher(Protocol):
    """Where a cancel publishes after its commit (the dispatcher, or an owner's shim)."""

    def publish(self, record: OutboxRecord) -> None:
        """Publish an outbox row the commit wrote."""
        ...

    def redispatch(self, session_id: str) -> None:
        """Publish one more task for the session."""
        ...


class Raced(Exception):
    """A session that had to be sealed was taken by a worker meanwhile (nothing written)."""


@dataclass(frozen=True)
class CancelReport:
    """What one cancel did.

    Attributes:
        sealed: sessions sealed by this cancel (deepest first).
        flagged: sessions a worker holds: flagged, sealed by their owners.
        woke: parents woken by a sealed child's completion.
    """

    sealed: tuple[str, ...] = ()
    flagged: tuple[str, ...] = ()
    woke: tuple[str, ...] = ()


def node_of(session: SessionRecord, lineage: dict[str, Any] | None = None) -> Node:
    """A session as :func:`~nahida_workers.core.facts.subtree_order` reads it."""
    return Node(
        session_id=session.session_id,
        parent_id=session.parent_id,
        done=session.status is SessionStatus.DONE,
        cancel_follows=str(session.config.get("parent_close", "cancel")) == "cancel",
        background=(lineage or {}).get("mode") == "background",
    )


def read_tree(ledger: Any, root: str) -> tuple[list[Node], dict[str, SessionRecord]]:
    """The root and every descendant a cancel follows, read from the ledger."""
    children = child_ledger(ledger)
    top = ledger.get_session(root)
    if top is None:
        raise NotFoundError(f"no session {root}")
    rows = {root: top}
    nodes = [node_of(top)]
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for kid in children.children(parent):
            node = node_of(kid)
            rows[kid.session_id] = kid
            nodes.append(node)
            if node.cancel_follows and kid.session_id not in frontier:
                frontier.append(kid.session_id)
    return nodes, rows


@dataclass
class Canceller:
    """Cancels sessions and their subtrees in the ledger (see the module doc).

    Attributes:
        inbox_limits: the bounds a background child's completion is posted under.
        sink: where a seal's ``final``/``done`` events go (watchers; the runner's sink).
    """

    ledger: Any
    leases: LeaseStore
    dispatcher: Publisher
    clock: Clock
    inbox_limits: InboxLimits = field(default_factory=InboxLimits)
    sink: EventSink = field(default_factory=NullSink)
    undelivered: Exception | None = field(default=None, init=False)

    def cancel(self, session_id: str) -> CancelReport:
        """Cancel ``session_id`` and its subtree now (see the module doc).

        Raises:
            NotFoundError: no such session.
            UserError: the session is done: there is nothing to cancel.
            LedgerError: the ledger refused or is unavailable (nothing written).
            Exception: the broker's error when the cancel is recorded but a
                flagged session could not be re-dispatched (the sweeper will).
        """
        session = self.ledger.get_session(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id}")
        if session.status is SessionStatus.DONE:
            raise UserError(f"session {session_id} is done; nothing to cancel")
        report = self.cancel_trees([session_id])
        if self.undelivered is not None:  # recorded; the broker is down (callers exit 4 / 202)
            error, self.undelivered = self.undelivered, None
            raise error
        return report

    def cancel_trees(self, roots: Sequence[str]) -> CancelReport:
        """Cancel each root's subtree in one transaction (see the module doc)."""
        order: list[str] = []
        rows: dict[str, SessionRecord] = {}
        nodes: list[Node] = []
        for root in roots:
            found, read = read_tree(self.ledger, root)
            nodes.extend(found)
            rows.update(read)
            order.extend(s for s in subtree_order(root, found) if s not in order)
        report = self.apply(order, nodes, rows)
        log.info(
            "cancel of %s: sealed %d, flagged %d (owned), woke %d parent(s)",
            ",".join(roots),
            len(report.sealed),
            len(report.flagged),
            len(report.woke),
        )
        return report

    def apply(
        self,
        order: Sequence[str],
        nodes: Sequence[Node],
        rows: dict[str, SessionRecord],
        *,
        finishes: dict[str, Finish] | None = None,
        decided_by: str = "cancel",
        must_seal: str | None = None,
        then: Callable[[Any], None] | None = None,
    ) -> CancelReport:
        """Seal or flag each session of ``order`` (deepest first) in ONE transaction.

        Args:
            order: the sessions, children before their ancestors.
            nodes / rows: the tree as read (unfinished children are named in
                a seal's terminal event).
            finishes: how a session ends when it is sealed (default
                ``cancelled/cancelled``).
            decided_by: who decided it, recorded in each terminal event.
            must_seal: a session that must be sealed here, or nothing is
                written (:class:`Raced` is raised: a worker took it meanwhile).
            then: more writes in the same transaction, after the seals (a
                timer's compare-and-set; it may raise to roll all back).

        Raises:
            Raced: ``must_seal`` could not be fenced (nothing written).
            LedgerError: the ledger refused or is unavailable (nothing written).
        """
        free = {sid: self.leases.holder(sid) is None for sid in order}
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                sealed, flagged = self._write(
                    order, nodes, rows, free, finishes or {}, decided_by, must_seal, then
                )
                break
            except LedgerUnavailableError as exc:
                # A deadlock with an owner's seal (it locks its row, then its
                # children's) aborts one side: take the whole cancel again.
                if attempt == WRITE_ATTEMPTS:
                    raise
                log.info("cancel of %s: %s; taking it again", ",".join(order[-1:]), exc)
                self.clock.sleep(0.05 * attempt)
        self._after(sealed, flagged, free)
        woke = tuple(u.woke for u in sealed if u.woke is not None)
        return CancelReport(tuple(u.session_id for u in sealed), tuple(flagged), woke)

    def _write(
        self,
        order: Sequence[str],
        nodes: Sequence[Node],
        rows: dict[str, SessionRecord],
        free: dict[str, bool],
        finishes: dict[str, Finish],
        decided_by: str,
        must_seal: str | None,
        then: Callable[[Any], None] | None,
    ) -> tuple[list[Unowned], list[str]]:
        """One attempt of :meth:`apply`'s transaction; what it sealed and flagged."""
        now = self.clock.now()
        control = control_ledger(self.ledger)
        children = child_ledger(self.ledger)
        sealed: list[Unowned] = []
        flagged: list[str] = []
        with self.ledger.transaction() as tx:
            done_here: set[str] = set()
            for sid in order:
                if control.fence_unowned(tx, sid, lease_free=free[sid], at=now) is None:
                    if sid == must_seal:
                        raise Raced(sid)
                    if control.flag_cancel(tx, sid, at=now):
                        flagged.append(sid)
                    continue
                session = rows[sid]  # read before the lock: its lineage and config
                left = [
                    n.session_id
                    for n in nodes
                    if n.parent_id == sid and not n.done and n.session_id not in done_here
                ]
                how = finishes.get(sid) or cancelled_finish()
                sealed.append(
                    seal_unowned(
                        self.ledger,
                        children,
                        tx,
                        session,
                        how,
                        now=now,
                        decided_by=decided_by,
                        inbox_limits=self.inbox_limits,
                        running=left,
                    )
                )
                done_here.add(sid)
            if then is not None:
                then(tx)
        return sealed, flagged

    def _after(self, sealed: list[Unowned], flagged: list[str], free: dict[str, bool]) -> None:
        """Publish what the commit owes; a broker error leaves it to the sweeper."""
        ended = {u.session_id for u in sealed}
        for unowned in sealed:
            try:
                unowned.observe(self.sink)
            except Exception as exc:  # watching is best effort; the ledger has it all
                log.warning("session %s: seal not reported: %s", unowned.session_id, exc)
        for unowned in sealed:
            for record in unowned.publish:
                woken = record.session_id == unowned.woke
                self._publish(record, skip=woken and record.session_id in ended)
        for sid in flagged:
            if free.get(sid) and self.leases.holder(sid) is None:
                try:
                    self.dispatcher.redispatch(sid)
                except Exception as exc:
                    log.warning("session %s: cancel flagged, not re-dispatched: %s", sid, exc)
                    self.undelivered = self.undelivered or exc
        for group in sorted({u.group for u in sealed if u.group is not None}):
            free_slot(self.ledger, group, at=self.clock.now(), publish=self.dispatcher.publish)

    def _publish(self, record: OutboxRecord, *, skip: bool) -> None:
        """Publish ``record``; a wake of a session this cancel sealed is recorded, never sent."""
        try:
            if skip:
                self.ledger.mark_published(record.outbox_id, at=self.clock.now())
            else:
                self.dispatcher.publish(record)
        except Exception as exc:
            log.warning("outbox %s not published (the sweeper will): %s", record.outbox_id, exc)


@dataclass
class _Closed:
    """An owner's publisher for :func:`cancel_closed`: re-dispatch is its seal's outbox row."""

    publish_record: Callable[[OutboxRecord], None]

    def publish(self, record: OutboxRecord) -> None:
        self.publish_record(record)

    def redispatch(self, session_id: str) -> None:
        """Nothing: :func:`cancel_closed` publishes the row of every child it did not seal."""


def cancel_closed(
    ledger: Any,
    leases: LeaseStore,
    clock: Clock,
    publish: Callable[[OutboxRecord], None],
    records: Sequence[OutboxRecord],
    *,
    inbox_limits: InboxLimits,
    sink: EventSink | None = None,
) -> CancelReport:
    """Cancel the children a parent's seal closed (``runtime/children/close.py``) at once.

    ``records``: the outbox row the seal wrote for each child (its
    re-dispatch).  A child sealed here has its row recorded published (no
    delivery is owed); any other child's row is published, as before.
    """
    by_id = {r.session_id: r for r in records}
    canceller = Canceller(ledger, leases, _Closed(publish), clock, inbox_limits)
    if sink is not None:
        canceller.sink = sink
    report = canceller.cancel_trees(list(by_id))
    sealed = set(report.sealed)
    for sid, record in by_id.items():
        try:
            if sid in sealed:
                ledger.mark_published(record.outbox_id, at=clock.now())
            else:
                publish(record)
        except Exception as exc:
            log.warning("outbox %s not published (the sweeper will): %s", record.outbox_id, exc)
    return report
