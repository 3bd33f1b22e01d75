"""The admission port (``ports.AdmissionLedger``) on every ledger adapter.

One contract for the memory twin, SQLite and PostgreSQL: a group's cap is
held by admission, a deferred session holds no slot and waits for a
release, a release gives out only the room the cap has (most urgent first,
then oldest) and writes the outbox rows to publish, a session with no group
or a group with no cap is never deferred, and a cancelled one is let through.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.records import Admission, SessionRecord
from nahida_workers.errors import NotFoundError
from nahida_workers.ledger.admission import admission_ledger
from tests.contract.ledger_world import T0, at

GROUP = "batch:b-1"


def _add(ledger: Any, session_id: str, *, group: str | None = GROUP, priority: int | None = None,
         created: float = 0.0) -> None:  # fmt: skip
    record = SessionRecord(
        session_id=session_id,
        workspace="/ws",
        config={"prompt": "p"},
        created_at=at(created),
        updated_at=at(created),
        priority=priority,
        admission_group=group,
    )
    with ledger.transaction() as tx:
        ledger.create_session(tx, record)


_COUNTER = itertools.count()


def _ids() -> Any:
    return lambda: f"ob-{next(_COUNTER)}"


def _stop(ledger: Any, session_id: str) -> None:
    """The session stops running (sealed; parking frees the slot the same way)."""
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, session_id, SessionStatus.DONE, at=at(50))


def test_a_cap_admits_that_many_and_defers_the_rest(ledger: Any) -> None:
    port = admission_ledger(ledger)
    port.set_cap(GROUP, 2, at=T0)
    for n in range(4):
        _add(ledger, f"s{n}", created=n)
    assert [port.admit(f"s{n}", at=at(10)) for n in range(4)] == [True, True, False, False]
    assert port.running(GROUP) == 2
    assert ledger.get_session("s0").status is SessionStatus.RUNNING
    deferred = ledger.get_session("s2")
    assert (deferred.status, deferred.admission) == (SessionStatus.QUEUED, Admission.DEFERRED)
    assert port.deferred_groups() == [GROUP]
    # No room: nothing is released, nothing is published.
    assert port.release(GROUP, at=at(11), new_id=_ids()) == []


def test_a_redelivery_of_a_running_session_is_admitted_again(ledger: Any) -> None:
    port = admission_ledger(ledger)
    port.set_cap(GROUP, 1, at=T0)
    _add(ledger, "s0")
    assert port.admit("s0", at=at(1))
    assert port.admit("s0", at=at(2)), "its own slot counted against it"


def test_a_freed_slot_releases_the_most_urgent_then_the_oldest(ledger: Any) -> None:
    port = admission_ledger(ledger)
    port.set_cap(GROUP, 1, at=T0)
    _add(ledger, "run", created=0)
    _add(ledger, "old", created=1)
    _add(ledger, "urgent", priority=9, created=3)
    _add(ledger, "new", created=2)
    assert port.admit("run", at=at(5))
    for sid in ("old", "urgent", "new"):
        assert not port.admit(sid, at=at(6))
    _stop(ledger, "run")
    released = port.release(GROUP, at=at(60), new_id=_ids())
    assert [r.session_id for r in released] == ["urgent"]
    assert released[0].outbox_id in {o.outbox_id for o in ledger.pending_outbox()}
    assert ledger.get_session("urgent").admission is Admission.RELEASED
    # The released session's slot is spoken for: a second release gives out nothing.
    assert port.release(GROUP, at=at(61), new_id=_ids()) == []
    assert port.admit("urgent", at=at(62))
    assert ledger.get_session("urgent").admission is None
    _stop(ledger, "urgent")
    assert [r.session_id for r in port.release(GROUP, at=at(70), new_id=_ids())] == ["old"]


def test_a_raised_cap_releases_as_many_as_it_has_room_for(ledger: Any) -> None:
    port = admission_ledger(ledger)
    port.set_cap(GROUP, 1, at=T0)
    for n in range(5):
        _add(ledger, f"s{n}", created=n)
        port.admit(f"s{n}", at=at(10))
    port.set_cap(GROUP, 3, at=at(20))
    released = port.release(GROUP, at=at(21), new_id=_ids())
    assert [r.session_id for r in released] == ["s1", "s2"]
    port.set_cap(GROUP, 0, at=at(30))  # 0: no cap -- every deferred session goes
    assert [r.session_id for r in port.release(GROUP, at=at(31), new_id=_ids())] == ["s3", "s4"]
    assert port.deferred_groups() == []


def test_no_group_no_cap_or_a_cancel_is_never_deferred(ledger: Any) -> None:
    port = admission_ledger(ledger)
    _add(ledger, "free", group=None)
    _add(ledger, "uncapped", group="batch:other")
    assert port.admit("free", at=at(1)) and port.admit("uncapped", at=at(1))
    port.set_cap(GROUP, 1, at=T0)
    _add(ledger, "a")
    _add(ledger, "b")
    assert port.admit("a", at=at(1))
    with ledger.transaction() as tx:
        ledger.request_cancel(tx, "b", at=at(2))
    assert port.admit("b", at=at(3)), "a cancelled session must reach its owner to be sealed"
    with pytest.raises(NotFoundError):
        port.admit("nobody", at=at(4))


def test_groups_are_independent(ledger: Any) -> None:
    port = admission_ledger(ledger)
    port.set_cap(GROUP, 1, at=T0)
    port.set_cap("schedule:x", 1, at=T0)
    _add(ledger, "a")
    _add(ledger, "b", group="schedule:x")
    assert port.admit("a", at=at(1)) and port.admit("b", at=at(1))
    assert (port.running(GROUP), port.running("schedule:x")) == (1, 1)


def test_the_sweeper_reads_counts_and_only_the_quiet_rows(ledger: Any) -> None:
    """What lets a sweep stay cheap behind a backlog: counts, and rows by last change."""
    for n in range(3):
        _add(ledger, f"q{n}", created=n)
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, "q2", SessionStatus.RUNNING, at=at(30))
    counts = ledger.session_counts()
    assert counts[SessionStatus.QUEUED] == (2, at(0))
    assert counts[SessionStatus.RUNNING] == (1, at(30))
    assert SessionStatus.DONE not in counts
    quiet = ledger.sessions(statuses=[SessionStatus.QUEUED], updated_before=at(1))
    assert [s.session_id for s in quiet] == ["q0"]
    assert ledger.sessions(statuses=[SessionStatus.RUNNING], updated_before=at(30)) == []
