"""The dashboard's figures: sessions by state, the last hour, queues, workers, schedules due.

Every figure is read when asked (the live stream asks every second or so):
counts are grouped in SQL; "the last hour" is the runs that ended in the
twelve five-minute buckets (on five-minute boundaries) ending with the
current one.  Queue depths and workers come from the broker
(:mod:`nahida_workers.web.probe`) and are None -- "unknown" -- when it cannot
be asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from nahida_workers.core.events import SessionStatus, TerminalState
from nahida_workers.ledger import schema as t
from nahida_workers.ledger.sql_base import ReadScope, utc
from nahida_workers.web.probe import BrokerProbe

__all__ = ["Dashboard", "due_schedules", "read_dashboard"]

#: The throughput window and its buckets.
WINDOW = timedelta(hours=1)
BUCKETS = 12
#: How many schedules "due next" lists.
DUE_SHOWN = 5
#: Most ended runs the window reads (a fleet past this shows "at least").
WINDOW_CAP = 50_000
#: Terminal states counted as failures in the window.
FAILURES = frozenset({TerminalState.FAILED.value})


@dataclass(frozen=True)
class Dashboard:
    """What the dashboard shows (None: unknown)."""

    now: datetime
    by_status: dict[str, int]
    ended: dict[str, int]
    buckets: list[dict[str, Any]]
    queues: dict[str, int | None]
    workers: list[str] | None
    due: list[dict[str, Any]] = field(default_factory=list)
    capped: bool = False

    @property
    def throughput(self) -> int:
        """Runs that ended in the window."""
        return sum(self.ended.values())

    @property
    def failures(self) -> int:
        """Runs that ended ``failed`` in the window."""
        return sum(n for state, n in self.ended.items() if state in FAILURES)


def read_dashboard(ledger: Any, probe: BrokerProbe, now: datetime) -> Dashboard:
    """Read every figure as of ``now`` (aware UTC)."""
    counts = ledger.session_counts()
    by_status = {s.value: counts.get(s, (0, None))[0] for s in SessionStatus}
    width = WINDOW / BUCKETS
    # Buckets on five-minute boundaries (the last one holds now): the figures,
    # and so the live region, change when a run ends, not every second.
    epoch = datetime(2000, 1, 1, tzinfo=now.tzinfo)
    end = epoch + ((now - epoch) // width + 1) * width
    since = end - WINDOW
    r = t.agent_runs.c
    with ReadScope(ledger.reader) as conn:
        rows = conn.execute(
            select(r.ended_at, r.terminal_state)
            .where(r.ended_at >= since, r.terminal_state.is_not(None))
            .limit(WINDOW_CAP)
        ).all()
    ended: dict[str, int] = {s.value: 0 for s in TerminalState}
    buckets: list[dict[str, Any]] = [
        {"start": since + i * width, "ended": 0, "failed": 0} for i in range(BUCKETS)
    ]
    for ended_at, state in rows:
        ended[state] = ended.get(state, 0) + 1
        at = utc(ended_at) or now
        index = min(BUCKETS - 1, max(0, int((at - since) / width)))
        buckets[index]["ended"] += 1
        if state in FAILURES:
            buckets[index]["failed"] += 1
    return Dashboard(
        now=now,
        by_status=by_status,
        ended=ended,
        buckets=buckets,
        queues=probe.queue_depths(),
        workers=probe.live_workers(),
        due=due_schedules(ledger.engine, now),
        capped=len(rows) >= WINDOW_CAP,
    )


def next_fire_of(schedule: Any, now: datetime) -> datetime | None:
    """When ``schedule`` fires next (jitter included); None while paused.

    The same rule ``nahida schedule list`` prints (``cli/schedule_cmds.py``).
    """
    from nahida_workers.schedules.timing import jitter_offset, next_fire

    if schedule.paused:
        return None
    fire = next_fire(schedule.definition, max(schedule.cursor, now))
    return fire + jitter_offset(schedule.schedule_id, fire, schedule.definition.jitter_s)


def due_schedules(engine: Engine, now: datetime, *, limit: int = DUE_SHOWN) -> list[dict[str, Any]]:
    """The live, unpaused schedules that fire soonest: name, id, trigger, next fire."""
    from nahida_workers.schedules.sql import SqlScheduleStore

    rows: list[dict[str, Any]] = []
    for schedule in SqlScheduleStore(engine).live():
        upcoming = next_fire_of(schedule, now)
        if upcoming is None:
            continue
        rows.append(
            {
                "name": schedule.name,
                "schedule_id": schedule.schedule_id,
                "trigger": schedule.definition.trigger_text(),
                "next_fire": upcoming,
                "in_s": max(0.0, (upcoming - now).total_seconds()),
            }
        )
    rows.sort(key=lambda row: row["next_fire"])
    return rows[:limit]
