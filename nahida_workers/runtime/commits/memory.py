"""The commit points of a session's workspace memory (docs/memory.md, DESIGN.md section 3).

==================  =============================================================
commit point        what it writes, in one fenced transaction
==================  =============================================================
``remember``        one memory item a ``Remember`` call proposed, classified by
                    ``core/memory.py`` (idempotent by the call: a recovery re-run
                    writes nothing new)
``note_uses``       which items a provider request injected and which a read in
                    the session superseded, once per (session, item)
==================  =============================================================

Fenced like every write of an owned session: a paused owner that lost its
lease writes no item.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nahida_workers.core.memory import MemoryItem
from nahida_workers.ledger.recall import recall_ledger
from nahida_workers.ports import Fence
from nahida_workers.runtime.ownership.heartbeat import Heartbeat

__all__ = ["MemoryCommits"]


class MemoryCommits:
    """Fenced memory writes of one owned session.

    Args:
        ledger: the ledger (its transactions).
        fence: the session's fence.
        heartbeat: checked before each commit.
        root_id: the session's tree root (every row carries it).
    """

    def __init__(self, ledger: Any, fence: Fence, heartbeat: Heartbeat, *, root_id: str) -> None:
        self.ledger = ledger
        self.recall = recall_ledger(ledger)
        self.fence = fence
        self.heartbeat = heartbeat
        self.root_id = root_id

    def remember(self, item: MemoryItem) -> tuple[MemoryItem, bool]:
        """Write ``item``; the stored item and whether it is new (``RecallLedger.add_item``)."""
        self.heartbeat.check()
        with self.ledger.transaction(fence=self.fence) as tx:
            return self.recall.add_item(tx, item)

    def note_uses(
        self, injected: list[str], superseded: list[str], *, at: datetime
    ) -> tuple[int, int]:
        """Note the items injected and superseded; how many of each were new for the session."""
        with self.ledger.transaction(fence=self.fence) as tx:
            notes = [
                self.recall.record_uses(
                    tx, self.fence.session_id, root_id=self.root_id, at=at, **{what: ids}
                )
                for what, ids in (("injected", injected), ("superseded", superseded))
            ]
        return notes[0], notes[1]
