"""The workspace-memory port on the SQL ledger (``ports.RecallLedger``).

Composed over a :class:`~nahida_workers.ledger.sql.SqlLedger`; writes run in
its transactions.  An item is inserted with ``ON CONFLICT DO NOTHING`` on
its id and on (workspace, content), then read back: two sessions
remembering the same thing at once store it once, and each is told which
item holds it.  A use is one conflict-free insert per (session, item) and
one conditional update of its timestamp, so it counts once per session.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select, update

from nahida_workers.core.memory import MemoryItem, MemoryKind, MemoryStatus, Provenance
from nahida_workers.errors import LedgerIntegrityError, NotFoundError
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.recall_rules import COUNTERS, check_new_item, same_item, workspace_key
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.sql_base import ReadScope, SqlTx, conflict_insert, utc

__all__ = ["SqlRecall"]

_mi = t.memory_items.c
_mu = t.memory_uses.c


class SqlRecall:
    """Workspace memory on a SQL ledger (see :class:`nahida_workers.ports.RecallLedger`)."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger

    # -- writes -------------------------------------------------------------------
    def add_item(self, tx: SqlTx, item: MemoryItem) -> tuple[MemoryItem, bool]:
        """Write ``item``, or return the one with its id or content."""
        check_new_item(item)
        conn = tx.conn
        key = workspace_key(item.workspace)
        done = conn.execute(
            conflict_insert(self.ledger.pg)(t.memory_items)
            .values(**_row(item, key))
            .on_conflict_do_nothing()
            .returning(_mi.item_id)  # not rowcount: psycopg may report -1
        ).first()
        if done is not None:
            return item, True
        by_id = conn.execute(select(t.memory_items).where(_mi.item_id == item.item_id)).first()
        if by_id is not None:
            existing = _item(by_id)
            if not same_item(existing, item):
                raise LedgerIntegrityError(f"memory item {item.item_id} holds other content")
            return existing, False
        other = conn.execute(
            select(t.memory_items).where(
                and_(_mi.workspace_key == key, _mi.content_sha256 == item.sha256)
            )
        ).first()
        if other is None:  # pragma: no cover - a conflict names one of the two keys
            raise LedgerIntegrityError(f"memory item {item.item_id} was not stored")
        return _item(other), False

    def decide_item(
        self,
        tx: SqlTx,
        item_id: str,
        status: MemoryStatus,
        *,
        at: datetime,
        by: str,
        expires_at: datetime | None = None,
    ) -> MemoryItem:
        """Approve (verified now) or reject an item."""
        if status is MemoryStatus.PENDING:
            raise LedgerIntegrityError("a decision is active or rejected, not pending")
        conn = tx.conn
        values: dict[str, Any] = {"status": status.value, "decided_at": at, "decided_by": by}
        if status is MemoryStatus.ACTIVE:
            values["verified_at"] = at
        if expires_at is not None:
            values["expires_at"] = expires_at
        row = conn.execute(
            update(t.memory_items)
            .where(_mi.item_id == item_id)
            .values(**values)
            .returning(*t.memory_items.c)
        ).first()
        if row is None:
            raise NotFoundError(f"no memory item {item_id}")
        return _item(row)

    def record_uses(
        self,
        tx: SqlTx,
        session_id: str,
        *,
        root_id: str,
        injected: Sequence[str] = (),
        superseded: Sequence[str] = (),
        at: datetime,
    ) -> int:
        """Note each item's injection / supersession once per session."""
        wanted = list(dict.fromkeys([*injected, *superseded]))
        if not wanted:
            return 0
        conn = tx.conn
        known = set(conn.execute(select(_mi.item_id).where(_mi.item_id.in_(wanted))).scalars())
        missing = [i for i in wanted if i not in known]
        if missing:
            raise LedgerIntegrityError(f"no memory item {missing[0]}")
        insert_ = conflict_insert(self.ledger.pg)
        for item_id in wanted:
            conn.execute(
                insert_(t.memory_uses)
                .values(session_id=session_id, item_id=item_id, root_id=root_id)
                .on_conflict_do_nothing()
            )
        new = 0
        for ids, column in ((injected, _mu.injected_at), (superseded, _mu.superseded_at)):
            if ids:
                noted = conn.execute(
                    update(t.memory_uses)
                    .where(
                        and_(
                            _mu.session_id == session_id,
                            _mu.item_id.in_(list(ids)),
                            column.is_(None),
                        )
                    )
                    .values({column.name: at})
                    .returning(_mu.item_id)
                ).all()
                new += len(noted)
        return new

    # -- reads --------------------------------------------------------------------
    def get_item(self, item_id: str) -> MemoryItem | None:
        """One item by id."""
        with ReadScope(self.ledger.reader) as conn:
            row = conn.execute(select(t.memory_items).where(_mi.item_id == item_id)).first()
        return _item(row) if row is not None else None

    def items(
        self, *, workspace: str | None = None, statuses: Sequence[MemoryStatus] | None = None
    ) -> list[MemoryItem]:
        """Items, oldest first."""
        query = select(t.memory_items).order_by(_mi.created_at, _mi.item_id)
        if workspace is not None:
            query = query.where(_mi.workspace_key == workspace_key(workspace))
        if statuses is not None:
            query = query.where(_mi.status.in_([s.value for s in statuses]))
        with ReadScope(self.ledger.reader) as conn:
            rows = conn.execute(query).all()
        return [_item(r) for r in rows if workspace is None or r.workspace == workspace]

    def counts(self, *, workspace: str | None = None) -> dict[str, int]:
        """The memory counters (``ledger/recall_rules.py`` ``COUNTERS``)."""
        where = _mi.workspace_key == workspace_key(workspace) if workspace is not None else None
        by_status = select(_mi.initial_status, _mi.status, func.count()).group_by(
            _mi.initial_status, _mi.status
        )
        uses = select(func.count(_mu.injected_at), func.count(_mu.superseded_at)).select_from(
            t.memory_uses.join(t.memory_items, _mi.item_id == _mu.item_id)
        )
        if where is not None:
            by_status, uses = by_status.where(where), uses.where(where)
        with ReadScope(self.ledger.reader) as conn:
            rows = conn.execute(by_status).all()
            injected, superseded = conn.execute(uses).one()
        found = dict.fromkeys(COUNTERS, 0)
        for initial, status, n in rows:
            found[f"written_{initial}"] += n
            if initial == "pending" and status == "active":
                found["approved"] += n
            if status == "rejected":
                found["rejected"] += n
        found["injected"], found["superseded"] = int(injected), int(superseded)
        return found


def _row(item: MemoryItem, key: str) -> dict[str, Any]:
    return {
        "item_id": item.item_id,
        "workspace_key": key,
        "workspace": item.workspace,
        "content_sha256": item.sha256,
        "kind": item.kind.value,
        "text": item.text,
        "provenance": item.provenance.value,
        "source_json": dict(item.source),
        "status": item.status.value,
        "initial_status": item.initial_status.value,
        "reason": item.reason,
        "subject": item.subject,
        "created_at": item.created_at,
        "verified_at": item.verified_at,
        "expires_at": item.expires_at,
        "decided_at": item.decided_at,
        "decided_by": item.decided_by,
        "root_id": item.root_id,
    }


def _item(row: Any) -> MemoryItem:
    created = utc(row.created_at)
    assert created is not None
    return MemoryItem(
        item_id=row.item_id,
        workspace=row.workspace,
        kind=MemoryKind(row.kind),
        text=row.text,
        provenance=Provenance(row.provenance),
        source=dict(row.source_json or {}),
        status=MemoryStatus(row.status),
        initial_status=MemoryStatus(row.initial_status),
        reason=row.reason,
        created_at=created,
        subject=row.subject,
        verified_at=utc(row.verified_at),
        expires_at=utc(row.expires_at),
        decided_at=utc(row.decided_at),
        decided_by=row.decided_by,
        root_id=row.root_id,
    )
