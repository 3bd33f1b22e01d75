"""The in-memory twin of ``ledger/sql_owners.py``: crash accounting and artifacts.

Same rules: progress at an epoch is a receipt written at it whose status is
not ``interrupted``/``aborted``, or a ``terminal`` event written at it.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime

from nahida_workers.core.events import Event, EventType, ExecutionReceipt
from nahida_workers.core.records import RunRecord, SessionRecord

__all__ = ["MemoryOwnerOps"]


class MemoryOwnerOps:
    """``close_owner``, the progress test of ``bump_epoch`` and the artifact store (a mixin)."""

    _lock: threading.RLock
    _sessions: dict[str, SessionRecord]
    _runs: dict[str, RunRecord]
    _events: dict[str, list[Event]]
    _receipts: dict[str, list[ExecutionReceipt]]
    _artifacts: dict[str, bytes]

    def _progressed(self, session_id: str, epoch: int) -> bool:
        """A finished tool execution or a seal written at ``epoch`` (``sql_owners.py``)."""
        for run in self._runs.values():
            if run.session_id != session_id:
                continue
            if any(
                r.epoch == epoch and r.status.value not in ("interrupted", "aborted")
                for r in self._receipts.get(run.run_id, [])
            ):
                return True
            if any(
                e.epoch == epoch and e.type is EventType.TERMINAL
                for e in self._events.get(run.run_id, [])
            ):
                return True
        return False

    def close_owner(self, session_id: str, epoch: int, *, at: datetime) -> None:
        """Hand the session back cleanly (no-op when a later owner took over)."""
        with self._lock:  # one row update: no journal needed (and no commit_hook)
            session = self._sessions.get(session_id)
            if session is None or session.open_epoch != epoch:
                return
            streak = 0 if self._progressed(session_id, epoch) else session.crash_streak
            self._sessions[session_id] = session.model_copy(
                update={"open_epoch": None, "crash_streak": streak}
            )

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` whole (once); returns its sha256 hex."""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            self._artifacts.setdefault(digest, bytes(data))
        return digest

    def get_artifact(self, sha256: str) -> bytes | None:
        """The stored bytes of artifact ``sha256`` (unchecked), or None."""
        with self._lock:
            return self._artifacts.get(sha256)
