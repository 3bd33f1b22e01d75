"""``Task`` with ``resume: CHILD_ID``: the next run of an existing child (DESIGN.md section 8).

A resumed call posts its prompt to the child's inbox (a ``user`` message,
``next_turn`` false: it starts the child's *next* run, which remembers its
earlier runs through ``runtime/ownership/history.py``), in the transaction that
commits the parent's ``tool_call``.  The message id is derived from the
parent's run and the call (:func:`resume_message_id`), so a parent killed
anywhere in the sequence posts it once.  The call is then waited on like a
foreground call: the parent parks until the child's run that claimed the
message ends, and adopts that run's outcome.

Only a child of the resuming session may be resumed (:func:`resume_problem`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.children import ChildView
from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import (
    InboxKind,
    InboxLimits,
    InboxMessage,
    InboxStatus,
    OutboxRecord,
)
from nahida_workers.errors import InboxFullError
from nahida_workers.ports import ChildLedger, Ledger, LedgerOutbox, LedgerWriter

__all__ = ["post_resume", "reopen", "resume_message_id", "resume_problem", "resume_view"]

log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("0b3c7a52-51f4-5d0e-b7f2-9d6c1e8a4f21")


def resume_message_id(parent_run_id: str, call_id: str) -> str:
    """The inbox message id of a resume: ``resume:{parent_run_id}:{call_id}``."""
    return f"resume:{parent_run_id}:{call_id}"


def resume_problem(children: ChildLedger[Any], parent_id: str, child: str) -> str | None:
    """Why ``child`` may not be resumed by ``parent_id`` (the error the model sees), or None."""
    link = children.link(child)
    if link is None or link.parent_id != parent_id:
        return f"Task: cannot resume {child!r}: it is not a child session of this session"
    return None


class _ReopenLedger(LedgerWriter[Any], LedgerOutbox[Any], Protocol):
    """The ledger ports :func:`reopen` writes through."""


def reopen(ledger: _ReopenLedger, tx: Any, child: str, key: str, now: datetime) -> OutboxRecord:
    """``child`` back to ``queued`` with an outbox row (publish it after commit).

    ``key`` makes the outbox id stable (a replay writes the same row).
    """
    ledger.set_session_status(tx, child, SessionStatus.QUEUED, at=now)
    record = OutboxRecord(
        outbox_id=uuid.uuid5(_NAMESPACE, f"{child}:{key}").hex,
        session_id=child,
        task_name=RUN_SESSION,
        created_at=now,
    )
    ledger.add_outbox(tx, record)
    return record


def post_resume(
    ledger: Ledger[Any], tx: Any, child: str, message_id: str, prompt: str, now: datetime
) -> OutboxRecord | str | None:
    """Post a resume prompt to ``child`` in ``tx`` (idempotent by ``message_id``).

    Returns the outbox row that re-dispatches a ``done`` child (publish it
    after commit), None when the child will see the message by itself (it
    runs, waits or is queued), or the error text when its inbox is full.
    """
    message = InboxMessage(
        message_id=message_id,
        session_id=child,
        kind=InboxKind.USER,
        text=prompt,
        size_bytes=len(prompt.encode("utf-8")),
        next_turn=False,  # starts the child's next run (section 8)
        created_at=now,
    )
    try:
        _, created = ledger.enqueue_inbox(tx, message, InboxLimits())  # locks the child row
    except InboxFullError as exc:
        return f"Task: cannot resume {child}: {exc}"
    session = ledger.get_session(child)
    if not created or session is None or session.status is not SessionStatus.DONE:
        return None
    return reopen(ledger, tx, child, message_id, now)


def resume_view(
    ledger: Ledger[Any],
    call_id: str,
    child: str,
    message_id: str,
    view_of_run: Callable[[str], ChildView],
    redispatch: Callable[[str, str], None],
) -> ChildView | None:
    """What became of a resumed call; None when its message was never posted.

    Settled once the child's run that claimed the message has sealed
    (``view_of_run(run_id)``).  A message still pending on a child that is
    ``done`` (its owner ended between a seal and the next-run check) gets
    the child re-dispatched (``redispatch(child, message_id)``), so the
    parent never parks on a child nobody runs.
    """
    message = next((m for m in ledger.inbox(child) if m.message_id == message_id), None)
    if message is None:
        return None
    if message.status is InboxStatus.PENDING or message.claimed_run_id is None:
        session = ledger.get_session(child)
        if session is not None and session.status is SessionStatus.DONE:
            redispatch(child, message_id)
        return ChildView(call_id, session_id=child)
    run = next((r for r in ledger.runs_of(child) if r.run_id == message.claimed_run_id), None)
    if run is None or run.terminal_state is None:
        return ChildView(call_id, session_id=child)
    return view_of_run(run.run_id)
