"""A session is a conversation: the history a later run starts from (DESIGN.md section 8).

DESIGN.md section 8: a run started after an earlier run sealed (steering after a
seal, ``--after-run``) must see the session's whole history -- every earlier
run's input, answers, tool calls and results -- before its own events.  The
core projects them (``RunState.history``) under the usual pairing and
compaction rules; this module reads them from the ledger.
"""

from __future__ import annotations

from nahida_workers.core.events import Event
from nahida_workers.ports import LedgerReader

__all__ = ["session_history"]


def session_history(ledger: LedgerReader, session_id: str, run_id: str) -> tuple[list[Event], int]:
    """The committed events of the runs before ``run_id``, in run order, and their count.

    Returns:
        ``(events, run_index)``: every event of every earlier run of the
        session (runs ordered by start), and how many runs came before.
    """
    runs = ledger.runs_of(session_id)
    ids = [r.run_id for r in runs]
    earlier = runs[: ids.index(run_id)] if run_id in ids else []
    return [e for r in earlier for e in ledger.events(r.run_id)], len(earlier)
