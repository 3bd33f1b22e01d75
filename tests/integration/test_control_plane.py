"""Control work is decided where the clock is, never behind session work (DESIGN.md section 1).

Real ``celery -A tasks worker`` and ``celery -A tasks beat`` processes on
the real broker and ledger:

* a schedule firing every 2 s while a backlog of 1,000 queued sessions
  drains on 2 slots: every fire is decided within 2 tick intervals of its
  due time (p99) and none is recorded ``missed``; the sweeper publishes an
  outbox row a crash left behind meanwhile (both used to wait in the
  ``sessions`` queue behind the whole backlog).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nahida_workers.core.events import SessionStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher, PublishDeferred, RecordOnlyQueue
from nahida_workers.schedules.model import FireOutcome, Overlap, ScheduleDef
from nahida_workers.schedules.sql import SqlScheduleStore
from nahida_workers.testing.backlog import backlog, decision_lags_s, percentile, scripted_job
from nahida_workers.testing.fleet import Fleet, make_repo, wait_for

pytestmark = pytest.mark.slow

TICK_S = 1.0
PERIOD_S = 2.0
BACKLOG = 1000
FIRES = 8


@pytest.fixture(autouse=True)
def _purge(fleet: Fleet) -> Iterator[None]:
    """The backlog these tests leave queued does not stay in the shared Redis."""
    yield
    fleet.stop()
    fleet.purge_broker()


def _queued(pg: SqlLedger, batch_id: str) -> int:
    return len(pg.sessions(batch_id=batch_id, statuses=[SessionStatus.QUEUED]))


def test_fires_and_sweeps_stay_on_time_behind_a_1000_session_backlog(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.extra_env.update(
        {"NAHIDA_SCHEDULE_TICK_S": str(TICK_S), "NAHIDA_SWEEPER_INTERVAL_S": "2"}
    )
    repo = make_repo(tmp_path / "repo")
    dispatcher = fleet.dispatcher(pg)
    # The backlog: short scripted sessions (0.1 s each) queued before any worker runs.
    big = dispatcher.create_batch("backlog", {}).batch_id
    backlog(dispatcher, scripted_job("backlog", delay_s=0.1).session_spec(), repo, BACKLOG,
            batch_id=big)  # fmt: skip
    # An outbox row a crash left unpublished (recorded, never sent).
    stranded = Dispatcher(pg, RecordOnlyQueue(), SystemClock())
    with pytest.raises(PublishDeferred):
        stranded.submit(scripted_job("stranded").session_spec(), workspace=str(repo))
    assert len(pg.pending_outbox()) == 1

    fleet.start_worker(name="w", concurrency=2)
    fleet.start_beat(name="beat")
    store = SqlScheduleStore(pg.engine)
    sid = uuid.uuid4().hex
    definition = ScheduleDef(
        name="every2",
        job=scripted_job("fired").model_dump(mode="json"),
        repos=(str(repo),),
        every_s=PERIOD_S,
        overlap=Overlap.ALLOW,
        catchup_window_s=2 * TICK_S + 1,  # a fire decided later than this is missed
    )
    store.put(definition, schedule_id=sid, at=datetime.now(UTC))

    wait_for(lambda: not pg.pending_outbox(), timeout=3 * 2 + 5, what="the sweeper's publish")
    swept_behind = _queued(pg, big)
    wait_for(
        lambda: len(store.fires(sid, limit=100)) >= FIRES,
        timeout=FIRES * PERIOD_S + 10,
        what=f"{FIRES} fires",
    )
    still_queued = _queued(pg, big)
    fires = sorted(store.fires(sid, limit=100), key=lambda f: f.fire_time)
    lags = decision_lags_s(fires)
    print(
        f"{len(fires)} fires behind a backlog of {still_queued}-{BACKLOG} queued sessions: "
        f"decision lag p50 {percentile(lags, 0.5):.3f}s p99 {percentile(lags, 0.99):.3f}s "
        f"max {max(lags):.3f}s (tick {TICK_S:g}s); sweep published with {swept_behind} queued"
    )
    # The whole window ran behind a backlog that a queued tick would have waited for.
    assert still_queued >= BACKLOG // 2, f"the backlog drained too soon ({still_queued} left)"
    assert swept_behind >= BACKLOG // 2
    assert percentile(lags, 0.99) <= 2 * TICK_S, lags
    assert not [f for f in fires if f.outcome is FireOutcome.MISSED]
    assert {f.outcome for f in fires} <= {FireOutcome.DISPATCHED, FireOutcome.DISPATCHING}


def _done(pg: SqlLedger, ids: list[str]) -> bool:
    return all(
        (s := pg.get_session(sid)) is not None and s.status is SessionStatus.DONE for sid in ids
    )


def test_a_small_urgent_batch_starts_before_a_large_one_drains(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    dispatcher = fleet.dispatcher(pg)
    large = dispatcher.create_batch("large", {}).batch_id
    backlog(dispatcher, scripted_job("large", delay_s=0.1).session_spec(), repo, 400,
            batch_id=large)  # fmt: skip
    fleet.start_worker(name="w", concurrency=2)
    wait_for(lambda: _queued(pg, large) < 395, timeout=30, what="the large batch to start")
    small = dispatcher.create_batch("small", {}).batch_id
    urgent = backlog(dispatcher, scripted_job("small").session_spec(), repo, 5,
                     batch_id=small, priority=9)  # fmt: skip
    submitted = datetime.now(UTC)
    wait_for(lambda: _done(pg, urgent), timeout=60, what="the urgent batch")
    waited = max((pg.get_session(s).updated_at - submitted).total_seconds() for s in urgent)  # type: ignore[union-attr]
    left = _queued(pg, large)
    print(f"5 urgent sessions done {waited:.2f}s after submission, {left} of 400 still queued")
    assert left >= 300, f"the urgent batch waited for the large one ({left} left)"


def test_a_cap_of_two_holds_on_six_slots(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    from nahida_workers.ledger.admission import admission_ledger

    repo = make_repo(tmp_path / "repo")
    dispatcher = fleet.dispatcher(pg)
    capped = dispatcher.create_batch("capped", {}).batch_id
    group = f"batch:{capped}"
    dispatcher.set_cap(group, 2)
    spec = scripted_job("capped", delay_s=0.2).session_spec()
    ids = [
        dispatcher.submit(
            spec, workspace=str(repo), batch_id=capped, admission_group=group,
            idempotency_key=f"{capped}:{n}",
        )[0].session_id
        for n in range(24)
    ]  # fmt: skip
    fleet.start_worker(name="w", concurrency=6)
    port = admission_ledger(pg)
    seen: list[int] = []

    def finished() -> bool:
        seen.append(port.running(group))
        return _done(pg, ids)

    wait_for(finished, timeout=120, what="every capped session", every=0.02)
    print(f"cap 2 on 6 slots: {len(seen)} readings, most running at once {max(seen)}")
    assert max(seen) == 2, f"the cap was broken or never reached: {sorted(set(seen))}"
    assert all(pg.runs_of(s)[0].terminal_state is not None for s in ids)
    assert all(pg.get_session(s).admission is None for s in ids)  # type: ignore[union-attr]
