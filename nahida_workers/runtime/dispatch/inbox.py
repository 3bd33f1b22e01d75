"""Posting to a session's inbox: steering, background completions, cancel (DESIGN.md section 8).

A message is a durable row before anyone acts on it; the same message id
twice is one message.  What happens next depends on the session:

* a worker owns it -- the message is claimed at its next provider boundary
  (or, when ``next_turn`` is false, starts the next run after this one);
* nobody owns it -- the session is dispatched again;
* it is done -- it goes back to ``queued`` and a new run starts from the
  message ("input that arrives after the run sealed starts the next run").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nahida_workers.core.records import InboxKind, InboxLimits, InboxMessage
from nahida_workers.errors import UserError
from nahida_workers.ports import Clock, LeaseStore, LedgerInbox, LedgerReader, LedgerWriter, TxT
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher

if TYPE_CHECKING:
    from nahida_workers.runtime.control.cancel import CancelReport
    from nahida_workers.runtime.observe.channel import EventSink

__all__ = ["Inbox", "InboxLedger"]


class InboxLedger(LedgerWriter[TxT], LedgerInbox[TxT], LedgerReader, Protocol[TxT]):
    """The ledger ports the inbox's write side uses (DESIGN.md section 8)."""


@dataclass
class Inbox:
    """The write side of session inboxes.

    Attributes:
        limits: pending-message bounds per session (20 user, 100 background,
            64 KiB by default).
        sink: where a cancel's seals report ``final``/``done`` (None: nowhere).
    """

    ledger: InboxLedger[Any]
    leases: LeaseStore
    dispatcher: Dispatcher
    clock: Clock
    limits: InboxLimits = field(default_factory=InboxLimits)
    sink: EventSink | None = None

    def post(
        self,
        session_id: str,
        text: str,
        *,
        message_id: str | None = None,
        kind: InboxKind = InboxKind.USER,
        next_turn: bool = True,
    ) -> tuple[InboxMessage, bool]:
        """Enqueue a message (idempotent by ``message_id``) and make sure it is seen.

        Returns:
            ``(message, created)``; ``created`` is False for a known id.

        Raises:
            NotFoundError: no such session.
            InboxFullError: a pending limit would be exceeded; nothing was written.
            UserError: an empty message.
        """
        if not text.strip():
            raise UserError("an inbox message needs text")
        now = self.clock.now()
        message = InboxMessage(
            message_id=message_id or uuid.uuid4().hex,
            session_id=session_id,
            kind=kind,
            text=text,
            size_bytes=len(text.encode("utf-8")),
            next_turn=next_turn,
            created_at=now,
        )
        # One connection per post: the status is changed in the transaction that
        # holds the session row lock, never read through a second pool checkout
        # (under a burst every holder of a lock waited for a second connection).
        with self.ledger.transaction() as tx:
            stored, created = self.ledger.enqueue_inbox(tx, message, self.limits)
            reopened = created and self.ledger.reopen_session(tx, session_id, at=now)
        if created and (reopened or self.leases.holder(session_id) is None):
            self.dispatcher.redispatch(session_id)
        return stored, created

    def cancel(self, session_id: str) -> CancelReport:
        """Cancel the session and its subtree now (``runtime/control/cancel.py``).

        A session no worker holds is sealed ``cancelled`` in this call's
        transaction (a parent waiting on it is woken); one a worker holds
        stops at its owner's next boundary.

        Raises:
            NotFoundError: no such session.
            UserError: the session is done: there is nothing to cancel.
        """
        from nahida_workers.runtime.control.cancel import Canceller

        canceller = Canceller(self.ledger, self.leases, self.dispatcher, self.clock, self.limits)
        if self.sink is not None:
            canceller.sink = self.sink
        return canceller.cancel(session_id)
