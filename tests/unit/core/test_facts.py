"""The pure rules of control facts (``core/facts.py``, DESIGN.md section 8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.facts import (
    Node,
    TimerAction,
    ancestor_cancelled,
    budget_timer,
    children_to_cancel,
    fire_action,
    may_seal,
    subtree_order,
    timer_id,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "open_epoch", "lease_free", "sealable"),
    [
        (SessionStatus.QUEUED, None, True, True),  # queued, deferred, waiting out a retry
        (SessionStatus.RUNNING, None, True, True),  # handed back (a retry) or admitted only
        (SessionStatus.QUEUED, None, False, False),  # a delivery holds the lease
        (SessionStatus.RUNNING, 3, True, False),  # an owner never handed it back
        (SessionStatus.WAITING, 3, False, True),  # parked: its owner writes nothing more
        (SessionStatus.DONE, None, True, False),
    ],
)
def test_who_may_seal(
    status: SessionStatus, open_epoch: int | None, lease_free: bool, sealable: bool
) -> None:
    assert may_seal(status, open_epoch, lease_free=lease_free) is sealable


def test_a_subtree_is_ordered_deepest_first_and_stops_at_abandon() -> None:
    nodes = [
        Node("p", None),
        Node("a", "p"),
        Node("a1", "a"),
        Node("b", "p", cancel_follows=False),  # parent_close: abandon
        Node("b1", "b"),
        Node("c", "p", done=True),
        Node("c1", "c"),  # a running child of a finished child is still covered
    ]
    assert subtree_order("p", nodes) == ["a1", "a", "c1", "p"]
    assert subtree_order("a", nodes) == ["a1", "a"]


def test_the_ancestor_chain_decides_a_birth() -> None:
    chain = [Node("me", "mid"), Node("mid", "root"), Node("root", None)]
    assert ancestor_cancelled(True, chain, {})
    assert ancestor_cancelled(False, chain, {"root": True})
    assert not ancestor_cancelled(False, chain, {"me": False})
    cut = [Node("me", "mid"), Node("mid", "root", cancel_follows=False), Node("root", None)]
    assert not ancestor_cancelled(False, cut, {"root": True})  # an abandon link stops it
    assert ancestor_cancelled(False, cut, {"mid": True})


def test_a_budget_timer_and_what_firing_it_does() -> None:
    timer = budget_timer("s", "root", "r1", started_at=T0, budget_s=10, now=T0)
    assert timer.due_at == T0 + timedelta(seconds=10)
    assert timer.timer_id == timer_id("s", "r1", "budget") != timer_id("s", "r2", "budget")
    before, after = T0 + timedelta(seconds=9), T0 + timedelta(seconds=10)
    assert fire_action(timer, open_run="r1", sealable=True, now=before) is None
    assert fire_action(timer, open_run="r1", sealable=True, now=after) is TimerAction.SEAL
    assert fire_action(timer, open_run="r1", sealable=False, now=after) is TimerAction.OWNED
    assert fire_action(timer, open_run="r2", sealable=True, now=after) is TimerAction.STALE
    assert fire_action(timer, open_run=None, sealable=True, now=after) is TimerAction.STALE


def test_a_budget_ended_parent_cancels_foreground_children_and_background_by_policy() -> None:
    kids = [
        Node("fg", "p"),
        Node("fg-abandon", "p", cancel_follows=False),
        Node("bg", "p", background=True),
        Node("bg-abandon", "p", cancel_follows=False, background=True),
        Node("done", "p", done=True),
    ]
    assert children_to_cancel(kids) == ["fg", "fg-abandon", "bg"]
