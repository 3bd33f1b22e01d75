"""Admission under a group's concurrency cap (DESIGN.md section 1), as pure rules.

A group (a batch, or every fire of a schedule) may cap how many of its
sessions run at once.  A delivery of a session whose group is at its cap is
not started: the session is *deferred* (no message queued, no slot held).
Each time a session of the group stops running, the ledger *releases* as
many deferred sessions as the cap has room for, most urgent first, and
their messages are published -- no polling, no busy loop.

Pure: counts in, decisions out.
"""

from __future__ import annotations

__all__ = ["admits", "releasable"]


def admits(max_running: int | None, running: int) -> bool:
    """Whether one more session may start while ``running`` others of its group run.

    ``max_running`` None or 0 means no cap.
    """
    return not max_running or running < max_running


def releasable(max_running: int | None, *, running: int, released: int, deferred: int) -> int:
    """How many deferred sessions to release now.

    Args:
        max_running: the group's cap (None or 0: no cap -- release them all).
        running: sessions of the group running now.
        released: sessions released earlier whose delivery has not started yet
            (their slot is spoken for).
        deferred: sessions waiting for a slot.

    Returns:
        A count in ``[0, deferred]``.
    """
    if not max_running:
        return deferred
    return max(0, min(deferred, max_running - running - released))
