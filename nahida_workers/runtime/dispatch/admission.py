"""Admission at delivery and release when a slot frees (DESIGN.md section 1).

A session whose group caps how many of its sessions run at once is admitted
by its delivery (``SessionRunner.run``) before any work starts: over the cap
it is *deferred* -- the delivery ends, the worker slot is free at once, and
no message waits for it.  When a session of the group stops running (sealed,
parked, settled), its owner calls :func:`free_slot`: the ledger releases as
many deferred sessions as the cap has room for and their messages are
published.  Nothing polls: a deferred session is woken by a slot, and the
sweeper (beat) releases any that a crash between the two left waiting.
The rules are pure (``core/capacity.py``); the ledger's admission port
(``ports.AdmissionLedger``) serialises each group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from nahida_workers.core.records import OutboxRecord, SessionRecord
from nahida_workers.ledger.admission import admission_ledger
from nahida_workers.runtime.dispatch.dispatcher import new_id

__all__ = ["admit", "free_slot"]

log = logging.getLogger(__name__)


def admit(ledger: Any, session: SessionRecord, *, at: datetime) -> bool:
    """Whether ``session``'s delivery may start now (deferred in the ledger when not).

    Raises:
        LedgerError: the ledger refused or is unavailable (the delivery is retried).
    """
    if session.admission_group is None:
        return True
    return admission_ledger(ledger).admit(session.session_id, at=at)


def free_slot(
    ledger: Any,
    group: str,
    *,
    at: datetime,
    publish: Callable[[OutboxRecord], None] | None,
) -> int:
    """Release the deferred sessions of ``group`` that now have room; publish them.

    Never raises: a failure leaves the release (or the publish of its outbox
    rows) to the sweeper.  Returns how many were released.
    """
    try:
        released = admission_ledger(ledger).release(group, at=at, new_id=new_id)
    except Exception as exc:
        log.warning(
            "group %s: releasing deferred sessions failed (%s); the sweeper will", group, exc
        )
        return 0
    for record in released:
        if publish is None:
            continue  # the sweeper publishes the outbox row
        try:
            publish(record)
        except Exception as exc:
            log.warning("session %s: released, not yet published (%s)", record.session_id, exc)
    if released:
        log.info("group %s: %d deferred session(s) released", group, len(released))
    return len(released)
