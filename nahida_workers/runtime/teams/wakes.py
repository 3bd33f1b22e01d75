"""Writing a team change's wake-ups and history lines, in its transaction (section 8).

The commit points (``runtime/commits/team.py``, ``runtime/commits/team_release.py``)
decide who to wake with the pure rules of ``core/team_gate.py``; these
helpers write the rows into the caller's transaction: a wake-up's message
(a ``background`` inbox message, never refused for space) and -- for a
session parked on the team -- the outbox row that re-dispatches it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nahida_workers.constants import RUN_SESSION
from nahida_workers.core.records import InboxKind, InboxMessage, OutboxRecord
from nahida_workers.core.team_gate import Wake
from nahida_workers.core.teams import LogAction, TaskLogEntry, TeamState
from nahida_workers.ports import LedgerOutbox, TeamLedger

__all__ = ["WAKE_NAMESPACE", "apply_wakes", "log_entry"]

#: The uuid5 namespace of the outbox rows team wake-ups write (stable ids).
WAKE_NAMESPACE = uuid.UUID("0b6c3f7e-52a1-5d0e-9e43-7d2a6f1c8b94")


def apply_wakes(
    ledger: LedgerOutbox[Any],
    teams: TeamLedger[Any],
    tx: Any,
    state: TeamState,
    wakes: Sequence[Wake],
    now: datetime,
) -> list[OutboxRecord]:
    """Post each wake-up's message; re-dispatch each one parked on the team.

    ``state`` is the team as the transaction left it (after the change):
    its version keys the outbox rows.  Returns the outbox rows written, to
    publish after commit.
    """
    records: list[OutboxRecord] = []
    for wake in wakes:
        member = state.member(wake.member_id)
        if member is None:
            continue
        if wake.text is not None and wake.message_id is not None:
            teams.post_message(
                tx,
                InboxMessage(
                    message_id=wake.message_id,
                    session_id=member.member_id,
                    kind=InboxKind.BACKGROUND,
                    text=wake.text,
                    size_bytes=len(wake.text.encode()),
                    next_turn=True,
                    created_at=now,
                ),
            )
        if member.parked_on is None:
            continue  # not parked on the team: it reads the message at its next step
        teams.set_waiting(tx, state.team_id, member.member_id, None)
        key = f"{state.team_id}:v{state.version}:wake:{member.member_id}"
        record = OutboxRecord(
            outbox_id=uuid.uuid5(WAKE_NAMESPACE, key).hex,
            session_id=member.member_id,
            task_name=RUN_SESSION,
            created_at=now,
        )
        ledger.add_outbox(tx, record)
        records.append(record)
    return records


def log_entry(
    state: TeamState,
    task_id: str,
    action: LogAction,
    at: datetime,
    *,
    member: str | None = None,
    epoch: int | None = None,
    **detail: Any,
) -> TaskLogEntry:
    """One history line of ``state``'s team."""
    return TaskLogEntry(
        state.team_id, task_id, action, at, member, epoch, dict(detail), root_id=state.root_id
    )
