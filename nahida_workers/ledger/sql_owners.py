"""The durable crash counter and the prompt artifact store of the SQL ledger.

Crash counter (item 2): ``bump_epoch`` (in ``sql_records.py``) marks the new
owner open and, in the same statement, settles the previous open owner: one
that never handed the session back counts as a crashed delivery unless it
made progress.  :meth:`OwnerOps.close_owner` hands a session back cleanly.

Progress at an epoch: a tool execution that finished (a receipt written at
that epoch whose status is not ``interrupted`` or ``aborted`` -- those are
the synthetic receipts of calls that did not finish) or a sealed run (a
``terminal`` event at that epoch).

Prompt artifacts (item 5): whole user input addressed by the sha256 of its
bytes, written once (a second write of the same bytes is a no-op).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, and_, bindparam, case, exists, select, update

from nahida_workers.ledger import pg_raw
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import ReadScope, SqlCore, conflict_insert

__all__ = ["SqlOwners", "crash_streak_after", "progressed_at"]

#: Receipt statuses that say the execution did not finish (synthetic receipts).
UNFINISHED = ("interrupted", "aborted")


def progressed_at(epoch: Any) -> ColumnElement[bool]:
    """SQL: the session row being updated made progress at fencing epoch ``epoch``."""
    s, r, a, e = t.sessions.c, t.agent_execution_receipts.c, t.agent_runs.c, t.agent_run_events.c
    receipt = exists(
        select(r.receipt_id)
        .select_from(t.agent_execution_receipts.join(t.agent_runs, r.run_id == a.run_id))
        .where(a.session_id == s.session_id, r.epoch == epoch, r.status.notin_(UNFINISHED))
    )
    sealed = exists(
        select(e.event_id)
        .select_from(t.agent_run_events.join(t.agent_runs, e.run_id == a.run_id))
        .where(a.session_id == s.session_id, e.epoch == epoch, e.event_type == "terminal")
    )
    return receipt | sealed


def crash_streak_after() -> ColumnElement[int]:
    """SQL: ``crash_streak`` once the open owner (if any) is settled as gone."""
    s = t.sessions.c
    return case(
        (s.open_epoch.is_(None), s.crash_streak),
        (progressed_at(s.open_epoch), 0),
        else_=s.crash_streak + 1,
    )


def _close_owner_statement() -> Any:
    s = t.sessions.c
    epoch = bindparam("b_epoch", 0, type_=BigInteger)
    return (
        update(t.sessions)
        .where(and_(s.session_id == bindparam("b_session_id", ""), s.open_epoch == epoch))
        .values(
            open_epoch=None,
            # No crash counted so far (the usual case): no progress query.
            crash_streak=case(
                (s.crash_streak == 0, 0),
                (progressed_at(epoch), 0),
                else_=s.crash_streak,
            ),
        )
    )


_CLOSE_OWNER = _close_owner_statement()
_CLOSE_OWNER_PG = pg_raw.Fixed(_CLOSE_OWNER.returning(t.sessions.c.session_id))


class SqlOwners:
    """``close_owner`` and the artifact store: a part of the SQL ledger.

    Args:
        core: the ledger's core (one-statement writes, the read engine).
    """

    def __init__(self, core: SqlCore) -> None:
        self._core = core

    def _read(self) -> ReadScope:
        return ReadScope(self._core.reader)

    def close_owner(self, session_id: str, epoch: int, *, at: datetime) -> None:
        """Hand the session back cleanly: owner ``epoch`` is no longer open.

        The crash streak is reset when this owner made progress, else kept.
        A no-op when a later owner has taken over (``open_epoch`` moved on).
        """
        if self._core.pg:
            self._core.raw(_CLOSE_OWNER_PG, b_session_id=session_id, b_epoch=epoch)
            return
        with self._core.single_statement() as conn:
            conn.execute(_CLOSE_OWNER, {"b_session_id": session_id, "b_epoch": epoch})

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` whole (once); returns its sha256 hex, the artifact's address."""
        digest = hashlib.sha256(data).hexdigest()
        values = {"sha256": digest, "size_bytes": len(data), "content": data, "created_at": at}
        dialect_insert = conflict_insert(self._core.pg)
        with self._core.single_statement() as conn:
            conn.execute(
                dialect_insert(t.prompt_artifacts)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["sha256"])
            )
        return digest

    def get_artifact(self, sha256: str) -> bytes | None:
        """The stored bytes of artifact ``sha256`` (unchecked), or None."""
        pa = t.prompt_artifacts.c
        with self._read() as conn:
            row = conn.execute(select(pa.content).where(pa.sha256 == sha256)).first()
        return None if row is None else bytes(row[0])
