"""Control facts decided in the ledger: cancels and timers (DESIGN.md section 8).

Pure rules the runtime applies in one ledger transaction, with no worker slot:

* :func:`may_seal` -- whether the canceller (or beat, for a timer) may seal a
  session itself: no worker holds it.  A ``waiting`` session's owner wrote
  its last fenced row when it parked; a ``queued`` or ``running`` one is
  free only when its lease is free *and* no owner took it without handing
  it back (``open_epoch`` is None -- a delivery that takes it later bumps the
  epoch after the seal and finds it done).  Anything else keeps the owner
  path: the cancel flag, seen at the owner's next boundary.
* :func:`subtree_order` -- the sessions one cancel covers, deepest first (the
  ledger's lock order is child before ancestor), following only children
  whose ``parent_close`` is ``cancel``.
* :func:`ancestor_cancelled` -- a spawn's check of its ancestor chain: a child
  of a cancelled line is born ``cancelled`` and never published.
* :class:`Timer` and :func:`budget_timer` -- a waiting session's deadline as
  a durable row (its wall-clock budget; later a wait bound or a person's
  answer); :func:`fire_action` decides what a due timer does, and
  :func:`children_to_cancel` which children a budget-ended parent cancels.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from nahida_workers.core.events import SessionStatus

__all__ = [
    "Node",
    "Timer",
    "TimerAction",
    "TimerKind",
    "ancestor_cancelled",
    "budget_timer",
    "children_to_cancel",
    "fire_action",
    "may_seal",
    "subtree_order",
    "timer_id",
]


def may_seal(status: SessionStatus, open_epoch: int | None, *, lease_free: bool) -> bool:
    """Whether a session no worker holds may be sealed by the canceller or beat.

    Args:
        status: the session's status, read under its row lock.
        open_epoch: the owner that took it and never handed it back (None: none).
        lease_free: nobody held its lease when the caller looked (just before).

    Returns:
        True for ``waiting`` (its owner parked: it writes nothing more), and
        for ``queued``/``running`` when the lease was free and no owner is
        open.  False for ``done`` and for a session an owner may hold.
    """
    if status is SessionStatus.DONE:
        return False
    if status is SessionStatus.WAITING:
        return True
    return lease_free and open_epoch is None


@dataclass(frozen=True)
class Node:
    """One session of a tree, as a cancel reads it.

    Attributes:
        session_id / parent_id: the session and its parent.
        done: its status is ``done``.
        cancel_follows: its ``parent_close`` is ``cancel`` (an ``abandon`` child
            keeps running when its parent ends, so a cancel stops there).
        background: it is a ``mode: background`` child.
    """

    session_id: str
    parent_id: str | None
    done: bool = False
    cancel_follows: bool = True
    background: bool = False


def subtree_order(root: str, nodes: Sequence[Node]) -> list[str]:
    """The unfinished sessions a cancel of ``root`` covers, deepest first.

    A child is covered when it is not done and its ``parent_close`` is
    ``cancel`` (its own children are then covered the same way); ``root``
    itself comes last when it is not done.  Children of one parent keep
    the order of ``nodes`` (oldest first).
    """
    kids: dict[str | None, list[Node]] = {}
    for node in nodes:
        kids.setdefault(node.parent_id, []).append(node)
    by_id = {n.session_id: n for n in nodes}
    order: list[str] = []

    def visit(session_id: str) -> None:
        for child in kids.get(session_id, []):
            if child.cancel_follows:
                visit(child.session_id)
        node = by_id.get(session_id)
        if node is None or not node.done:
            order.append(session_id)

    visit(root)
    return order


def ancestor_cancelled(
    own_cancel: bool, chain: Sequence[Node], cancelled: Mapping[str, bool]
) -> bool:
    """Whether a session about to spawn belongs to a cancelled line.

    Args:
        own_cancel: the spawning session's own cancel flag (read under its lock).
        chain: the spawning session, then its parent, ... up to the root; a
            session whose ``cancel_follows`` is False ends the chain above it
            (its parent's cancel does not reach it).
        cancelled: session id -> its cancel flag is set.

    Returns:
        True when the spawning session or an ancestor it follows is cancelled.
    """
    if own_cancel:
        return True
    for below, above in itertools.pairwise(chain):
        if not below.cancel_follows:
            return False
        if cancelled.get(above.session_id, False):
            return True
    return False


class TimerKind(StrEnum):
    """What a durable timer bounds."""

    BUDGET = "budget"  # the run's wall-clock budget (``limits.wall_clock_budget_s``)
    WAIT_BOUND = "wait_bound"  # how long a wait may last (reserved)
    ANSWER = "answer"  # a person's answer (reserved)


@dataclass(frozen=True)
class Timer:
    """A deadline of a waiting session (the ``session_timers`` row, migration 0012).

    Attributes:
        timer_id: stable per (session, run, kind): a re-park re-arms the row.
        session_id / root_id: the session and its tree's root.
        kind: what it bounds (:class:`TimerKind` value; a string, so later
            kinds need no migration).
        due_at: when it fires (UTC).
        payload: what the firing needs (``run_id`` for a budget).
        created_at: when it was (last) armed.
        fired_at / outcome: when beat fired it and what that did (None: armed).
    """

    timer_id: str
    session_id: str
    root_id: str
    kind: str
    due_at: datetime
    created_at: datetime
    payload: dict[str, Any] = field(default_factory=dict)
    fired_at: datetime | None = None
    outcome: str | None = None


def timer_id(session_id: str, run_id: str, kind: str) -> str:
    """32 hex characters of the sha256 of ``timer:{session_id}:{run_id}:{kind}`` (stable)."""
    return hashlib.sha256(f"timer:{session_id}:{run_id}:{kind}".encode()).hexdigest()[:32]


def budget_timer(
    session_id: str,
    root_id: str,
    run_id: str,
    *,
    started_at: datetime,
    budget_s: float,
    now: datetime,
) -> Timer:
    """The wall-clock budget of run ``run_id`` as a timer: due ``started_at + budget_s``.

    The budget counts from the run's start, as the loop's own check does
    (``core/loop.py``: ``elapsed_s >= wall_clock_budget_s``).
    """
    return Timer(
        timer_id=timer_id(session_id, run_id, TimerKind.BUDGET.value),
        session_id=session_id,
        root_id=root_id,
        kind=TimerKind.BUDGET.value,
        due_at=started_at + timedelta(seconds=budget_s),
        created_at=now,
        payload={"run_id": run_id, "budget_s": budget_s},
    )


class TimerAction(StrEnum):
    """What a due timer does (recorded as its ``outcome``)."""

    SEAL = "sealed"  # beat sealed the session (budget: ``incomplete/budget_exhausted``)
    OWNED = "owned"  # a worker holds the session: its loop enforces its own budget
    STALE = "stale"  # the session or the run it bounded has ended: nothing to do


def fire_action(
    timer: Timer, *, open_run: str | None, sealable: bool, now: datetime
) -> TimerAction | None:
    """What firing ``timer`` does now, or None when it is not due yet.

    Args:
        open_run: the session's open run (None: none is open).
        sealable: :func:`may_seal` for the session, read under its lock.
    """
    if timer.due_at > now:
        return None
    if open_run is None or timer.payload.get("run_id") not in (None, open_run):
        return TimerAction.STALE
    return TimerAction.SEAL if sealable else TimerAction.OWNED


def children_to_cancel(children: Sequence[Node]) -> list[str]:
    """The unfinished children a parent ended by its budget cancels, oldest first.

    Foreground children are cancelled: the parent that waited for them is
    gone, and a foreground child inherits its parent's deadline.  A
    background child follows its ``parent_close`` like at any parent end
    (``cancel``, the default: cancelled; ``abandon``: it keeps running).
    """
    return [c.session_id for c in children if not c.done and (not c.background or c.cancel_follows)]
