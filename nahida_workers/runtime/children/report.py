"""What ``TaskOutput`` reports of a child session (DESIGN.md section 8).

Read from the ledger only.  A session may read the sessions of its own tree
that descend from it (its children, their children ...): an id that is
unknown or belongs elsewhere is refused with the same text, so a model
cannot probe other trees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import EventType
from nahida_workers.ports import ChildLedger, Ledger

__all__ = ["child_report"]

#: Characters of the final text a report carries.
FINAL_CHARS = 8000


def child_report(
    ledger: Ledger[Any], children: ChildLedger[Any], reader_id: str, task_id: str
) -> Mapping[str, Any] | str:
    """``task_id``'s report for ``reader_id``, or the error text the model sees.

    Returns:
        ``{"task_id", "status", "description", "runs": [{"run_id", "state",
        "reason"}], "final": {"run_id", "state", "reason", "text", "commit"} | None}``.
    """
    link = children.link(task_id)
    ancestors = link.lineage.get("ancestors", []) if link is not None else []
    session = ledger.get_session(task_id)
    if link is None or session is None or reader_id not in ancestors:
        return f"TaskOutput: no child session {task_id!r} in this session's tree"
    runs = ledger.runs_of(task_id)
    sealed = [r for r in runs if r.terminal_state is not None]
    final: dict[str, Any] | None = None
    if sealed:
        last = sealed[-1]
        terminal = next(
            (e for e in reversed(ledger.events(last.run_id)) if e.type is EventType.TERMINAL),
            None,
        )
        payload: Mapping[str, Any] = terminal.payload if terminal is not None else {}
        final = {
            "run_id": last.run_id,
            "state": last.terminal_state.value if last.terminal_state else None,
            "reason": last.terminal_reason.value if last.terminal_reason else None,
            "text": str(payload.get("final_text", ""))[:FINAL_CHARS],
            "commit": payload.get("commit"),
        }
    return {
        "task_id": task_id,
        "status": session.status.value,
        "description": link.lineage.get("description"),
        "runs": [
            {
                "run_id": r.run_id,
                "state": r.terminal_state.value if r.terminal_state else None,
                "reason": r.terminal_reason.value if r.terminal_reason else None,
            }
            for r in runs
        ],
        "final": final,
    }
