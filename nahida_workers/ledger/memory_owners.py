"""The in-memory twin of ``ledger/sql_owners.py``: crash accounting and artifacts.

Same rules: progress at an epoch is a receipt written at it whose status is
not ``interrupted``/``aborted``, or a ``terminal`` event written at it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from nahida_workers.core.events import EventType
from nahida_workers.ledger.memory_parts import MemoryTables

__all__ = ["MemoryOwners"]


class MemoryOwners:
    """``close_owner``, the progress test of ``bump_epoch`` and the artifact store: a part.

    Args:
        tables: the twin's tables.
    """

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def progressed(self, session_id: str, epoch: int) -> bool:
        """A finished tool execution or a seal written at ``epoch`` (``sql_owners.py``)."""
        for run in self._t.runs.values():
            if run.session_id != session_id:
                continue
            if any(
                r.epoch == epoch and r.status.value not in ("interrupted", "aborted")
                for r in self._t.receipts.get(run.run_id, [])
            ):
                return True
            if any(
                e.epoch == epoch and e.type is EventType.TERMINAL
                for e in self._t.events.get(run.run_id, [])
            ):
                return True
        return False

    def close_owner(self, session_id: str, epoch: int, *, at: datetime) -> None:
        """Hand the session back cleanly (no-op when a later owner took over)."""
        with self._t.lock:  # one row update: no journal needed (and no commit_hook)
            session = self._t.sessions.get(session_id)
            if session is None or session.open_epoch != epoch:
                return
            streak = 0 if self.progressed(session_id, epoch) else session.crash_streak
            self._t.sessions[session_id] = session.model_copy(
                update={"open_epoch": None, "crash_streak": streak}
            )

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` whole (once); returns its sha256 hex."""
        digest = hashlib.sha256(data).hexdigest()
        with self._t.lock:
            self._t.artifacts.setdefault(digest, bytes(data))
        return digest

    def get_artifact(self, sha256: str) -> bytes | None:
        """The stored bytes of artifact ``sha256`` (unchecked), or None."""
        with self._t.lock:
            return self._t.artifacts.get(sha256)
