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
