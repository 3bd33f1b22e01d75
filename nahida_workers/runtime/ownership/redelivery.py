"""No delivery is the last one while a session is unfinished.

DESIGN.md section 4: a duplicate delivery finds the lease held and exits.
Exiting alone is not safe.  With a prefork pool, the OOM killer (or any
SIGKILL) takes the pool child that owns a session; the parent requeues the
message at once, the next child finds the dead child's lease still live,
exits, and its message is acked -- without beat nothing would ever run the
session again.  (With a thread pool, a Redis visibility-timeout redelivery
of a long run is acked the same way, and its ack removes the owner's own
unacknowledged message from the broker.)

So a delivery that ends without the session being finished leaves a
*follow-up*: a ``run_session`` message delayed until the lease it saw would
expire (:func:`plan_follow_up`), carrying the owner token it saw:

* when it fires and the lease is free, it takes the session (the owner it saw
  is dead: its lease was not renewed);
* when the same owner still holds it, that owner is alive and the follow-up
  follows it again, one TTL later -- a harmless no-op delivery per TTL, at
  most ``max_hops`` times;
* when a different owner holds it, the follow-up ends: that owner took the
  session in a delivery of its own, whose message (or a follow-up of it)
  follows it in turn -- unless that owner took it in *this very message*
  (the owner token carries a tag of the message, :func:`delivery_tag`): a
  message whose owner died is requeued by the prefork parent or restored by
  the broker, and then it is the one that must follow its dead owner.

A delivery that lost its lease mid-run leaves a follow-up only when nobody
holds the lease (a paused owner that woke up after its lease expired).

A free lease is not proof that its owner is gone: after a lease-store
restart a live owner's key is missing until its next renewal re-takes it
(``heartbeat.py``).  A delivery without evidence that the owner lapsed (no
``seen_owner``) that finds the key free on a session whose owner never
handed it back (``OWNER_MAY_BE_ALIVE``) leaves a follow-up one renewal
interval later, marked :data:`SEEN_FREE`: by then a live owner holds its key
again (the follow-up ends, that owner goes on) or the owner is gone (the
follow-up takes the session).

Countdowns stay below the broker's visibility timeout: kombu's Redis
transport keeps a delayed message unacknowledged in the worker, and
redelivers it after the visibility timeout (a duplicate) if the countdown
were longer.

Poison sessions (item 2) are counted in the ledger, not here: see
``LedgerOwners.bump_epoch`` and :func:`is_poison`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from nahida_workers.runtime.ownership.outcome import SessionOutcome

__all__ = ["SEEN_FREE", "FollowUp", "delivery_tag", "is_poison", "plan_follow_up"]

#: ``seen_owner`` of a follow-up whose sender found the lease free on a session
#: whose owner never handed it back (it waited a renewal interval for that owner).
SEEN_FREE = "-"


def delivery_tag(message_id: str) -> str:
    """A short tag of a broker message id (the same for every redelivery of it)."""
    return "d" + hashlib.sha256(message_id.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class FollowUp:
    """The ``run_session`` message a delivery leaves behind.

    Attributes:
        seen_owner: the lease owner token this delivery saw (None: none).
        hop: its place in the chain (the first follow-up of a delivery is 1).
        countdown_s: seconds until it is delivered.
    """

    seen_owner: str | None
    hop: int
    countdown_s: float


def plan_follow_up(
    outcome: SessionOutcome,
    *,
    holder: str | None,
    ttl_ms: int | None,
    seen_owner: str | None,
    hop: int,
    tag: str = "",
    lease_ttl_s: float,
    visibility_timeout_s: float,
    max_hops: int,
) -> FollowUp | None:
    """The follow-up a delivery with ``outcome`` must leave, or None (rules in the module doc).

    Args:
        outcome: what this delivery did.
        holder / ttl_ms: the session lease's owner token and remaining TTL in
            milliseconds, read after the delivery ended (None: not held).
        seen_owner / hop: what this delivery itself carried (None / 0 for a
            first delivery).
        tag: this delivery's :func:`delivery_tag` (in the owner tokens it makes).
        lease_ttl_s / visibility_timeout_s: the fleet's settings, in seconds.
        max_hops: the longest chain that follows one live owner.
    """
    margin_s = max(0.5, 0.1 * lease_ttl_s)
    cap_s = (lease_ttl_s + visibility_timeout_s) / 2  # below the visibility timeout
    next_hop = hop + 1
    if next_hop > max_hops:
        return None
    if outcome is SessionOutcome.LEASE_LOST:
        return None if holder is not None else FollowUp(None, next_hop, min(margin_s, cap_s))
    if outcome is SessionOutcome.OWNER_MAY_BE_ALIVE:  # one renewal interval for a re-take
        return FollowUp(SEEN_FREE, next_hop, min(lease_ttl_s / 3 + margin_s, cap_s))
    if outcome is not SessionOutcome.LEASE_HELD:
        return None
    mine = bool(tag) and holder is not None and holder.endswith(f":{tag}")
    if holder is not None and seen_owner is not None and holder != seen_owner and not mine:
        return None  # a newer owner: its own delivery follows it
    if holder is None:  # freed since: take it now
        return FollowUp(None, next_hop, 0.0)
    remaining_s = (ttl_ms if ttl_ms is not None and ttl_ms > 0 else lease_ttl_s * 1000) / 1000
    return FollowUp(holder, next_hop, min(remaining_s + margin_s, cap_s))


def is_poison(crash_streak: int, limit: int) -> bool:
    """A session whose last ``limit`` owners all crashed without progress (item 2)."""
    return crash_streak >= limit
