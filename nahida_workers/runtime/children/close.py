"""What a seal does for child sessions (DESIGN.md section 8).

Both run inside the seal's transaction:

* :func:`post_completion` -- a child's completion into its parent's inbox.
  A completion is a runtime fact: no steering limit refuses it (DESIGN.md
  section 8), foreground (its call's result) or ``mode: background`` (input for
  the parent's next turn).
* :func:`close_children` -- the parent-close policy (Temporal's
  ParentClosePolicy): each child still unfinished when its parent ends is
  named in the parent's terminal event, and a child whose profile says
  ``parent_close: cancel`` (the default) gets its cancel requested and is
  re-dispatched (a parked child then seals ``cancelled``, and cascades to
  its own children the same way); ``abandon`` leaves it running.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.records import InboxLimits, InboxMessage, OutboxRecord
from nahida_workers.ports import (
    ChildLedger,
    LedgerInbox,
    LedgerOutbox,
    LedgerReader,
    LedgerWriter,
    TxT,
)

__all__ = ["CloseLedger", "close_children", "post_completion", "unfinished_children"]


class CloseLedger(
    LedgerWriter[TxT], LedgerInbox[TxT], LedgerOutbox[TxT], LedgerReader, Protocol[TxT]
):
    """The ledger ports a seal's child work uses."""


log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("a4b1f0c9-3d52-5e8a-9c17-6f2e0d8b5a43")


def post_completion(
    ledger: CloseLedger[Any],
    children: ChildLedger[Any],
    tx: Any,
    message: InboxMessage,
    wake: OutboxRecord,
    *,
    limits: InboxLimits,
    at: datetime,
    child: str,
) -> bool:
    """Post ``message`` (``child``'s completion) in ``tx``; True when it woke the parent.

    ``message.next_turn`` marks a background child's completion (input for
    the parent's next turn); a foreground one is adopted as its call's
    result.  Either is a runtime fact: never refused by the steering
    ``limits`` (DESIGN.md section 8: facts are never dropped).
    """
    if message.next_turn:
        ledger.enqueue_inbox(tx, message, limits)  # locks the parent row; facts are never refused
    return children.post_child_completion(tx, message, wake, at=at)


def unfinished_children(children: ChildLedger[Any], parent_id: str) -> list[str]:
    """Ids of ``parent_id``'s children that are not ``done``, oldest first."""
    return [
        s.session_id for s in children.children(parent_id) if s.status is not SessionStatus.DONE
    ]


def close_children(
    ledger: CloseLedger[Any],
    tx: Any,
    running: Sequence[str],
    run_id: str,
    now: datetime,
) -> list[OutboxRecord]:
    """Apply each running child's ``parent_close`` policy in ``tx``; outbox rows to publish.

    ``running``: the parent's unfinished children (:func:`unfinished_children`);
    ``run_id``: the parent run whose seal closes them (makes the rows' ids stable).
    """
    published: list[OutboxRecord] = []
    for child in running:
        session = ledger.get_session(child)
        if session is None or session.status is SessionStatus.DONE:
            continue
        if str(session.config.get("parent_close", "cancel")) != "cancel":
            log.info("child %s abandoned by its parent's end (parent_close: abandon)", child)
            continue
        ledger.request_cancel(tx, child, at=now)
        record = OutboxRecord(
            outbox_id=uuid.uuid5(_NAMESPACE, f"{child}:parent-close:{run_id}").hex,
            session_id=child,
            task_name=RUN_SESSION,
            created_at=now,
        )
        ledger.add_outbox(tx, record)
        published.append(record)
    return published


def own_description(link: ChildLink | None) -> str:
    """A child's Task description, from its lineage (empty when unknown)."""
    return str(link.lineage.get("description", "")) if link is not None else ""
