"""The follow-up a delivery leaves behind (issue 10 item 1, ``runtime/ownership/redelivery.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.runtime.ownership.redelivery import (
    SEEN_FREE,
    FollowUp,
    delivery_tag,
    plan_follow_up,
)
from nahida_workers.runtime.ownership.session import owner_token

HELD = SessionOutcome.LEASE_HELD
BASE: dict[str, Any] = {"lease_ttl_s": 30.0, "visibility_timeout_s": 300.0, "max_hops": 5}


def plan(outcome: SessionOutcome, **kw: Any) -> FollowUp | None:
    args = {"holder": "h:1:a", "ttl_ms": 12_000, "seen_owner": None, "hop": 0, **BASE, **kw}
    return plan_follow_up(outcome, **args)


def test_a_first_delivery_that_finds_the_lease_held_follows_its_owner() -> None:
    assert plan(HELD) == FollowUp("h:1:a", 1, 15.0)  # 12 s left + a 3 s margin


def test_the_chain_follows_a_live_owner_up_to_max_hops() -> None:
    assert plan(HELD, seen_owner="h:1:a", hop=3) == FollowUp("h:1:a", 4, 15.0)
    assert plan(HELD, seen_owner="h:1:a", hop=5) is None


def test_a_newer_owner_ends_the_chain_unless_it_took_the_lease_in_this_message() -> None:
    assert plan(HELD, seen_owner="h:0:z", holder="h:1:a") is None
    tag = delivery_tag("task-1")
    mine = owner_token(tag)
    assert mine.endswith(f":{tag}") and delivery_tag("task-1") == tag
    assert plan(HELD, seen_owner="h:0:z", holder=mine, tag=tag) == FollowUp(mine, 1, 15.0)


def test_a_lease_freed_meanwhile_is_taken_at_once() -> None:
    assert plan(HELD, holder=None, ttl_ms=None) == FollowUp(None, 1, 0.0)


def test_a_lost_lease_is_followed_only_when_nobody_holds_it() -> None:
    assert plan(SessionOutcome.LEASE_LOST, holder=None) == FollowUp(None, 1, 3.0)
    assert plan(SessionOutcome.LEASE_LOST) is None


@pytest.mark.parametrize(
    "outcome", [SessionOutcome.FINISHED, SessionOutcome.ALREADY_DONE, SessionOutcome.NOT_FOUND]
)
def test_finished_deliveries_leave_nothing(outcome: SessionOutcome) -> None:
    assert plan(outcome) is None


def test_the_countdown_stays_below_the_visibility_timeout() -> None:
    got = plan(HELD, ttl_ms=29_000, lease_ttl_s=30.0, visibility_timeout_s=31.0)
    assert got is not None and got.countdown_s < 31.0


def test_a_free_lease_whose_owner_never_handed_back_is_looked_at_again_a_renewal_later() -> None:
    # 30 s TTL: renewals every 10 s, plus the 3 s margin
    followed = plan(SessionOutcome.OWNER_MAY_BE_ALIVE, holder=None, ttl_ms=None)
    assert followed == FollowUp(SEEN_FREE, 1, 13.0)
    # ... and by then the live owner holds its key again: the chain ends
    assert plan(HELD, seen_owner=SEEN_FREE, holder="h:1:a") is None
