"""A scheduler over in-memory ports and a fake clock, for the tick tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nahida_workers.core.events import SessionStatus
from nahida_workers.lease.memory import MemoryLeaseStore
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.sweeper import Sweeper
from nahida_workers.schedules.model import FireOutcome, FireRecord, Schedule, ScheduleDef
from nahida_workers.schedules.scheduler import Scheduler
from nahida_workers.schedules.store import MemoryScheduleStore, ScheduleStore
from nahida_workers.testing import FakeClock, ListTaskQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB: dict[str, Any] = {
    "name": "demo",
    "prompt": "survey",
    "provider": {"kind": "scripted", "script": {"turns": [{"text": "done"}]}},
    "tools": ["Glob"],
}


@dataclass
class World:
    """Store, ledger, queue and clock shared by any number of schedulers ("beats")."""

    store: ScheduleStore = field(default_factory=MemoryScheduleStore)
    ledger: Any = field(default_factory=MemoryLedger)
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    queue: ListTaskQueue = field(default_factory=ListTaskQueue)
    cancelled: list[str] = field(default_factory=list)
    outcomes: list[tuple[str, FireOutcome]] = field(default_factory=list)

    def scheduler(self, who: str = "beat-a") -> Scheduler:
        return Scheduler(
            store=self.store,
            ledger=self.ledger,
            dispatcher=Dispatcher(self.ledger, self.queue, self.clock),
            clock=self.clock,
            cancel_session=self.cancelled.append,
            who=who,
            on_outcome=lambda name, outcome: self.outcomes.append((name, outcome)),
        )

    def add(
        self, name: str = "s", *, repos: tuple[str, ...] = ("/r1", "/r2"), **fields: Any
    ) -> Schedule:
        fields.setdefault("every_s", 10)
        definition = ScheduleDef(name=name, job=JOB, repos=repos, **fields)
        schedule, _ = self.store.put(definition, schedule_id=f"id-{name}", at=self.clock.now())
        return schedule

    def at(self, seconds: float) -> datetime:
        return T0 + timedelta(seconds=seconds)

    def move_to(self, seconds: float) -> None:
        self.clock.advance((self.at(seconds) - self.clock.now()).total_seconds())

    def fires(self, name: str = "s") -> list[FireRecord]:
        schedule = self.store.get(name)
        assert schedule is not None
        return sorted(
            self.store.fires(schedule.schedule_id, limit=10_000), key=lambda f: f.fire_time
        )

    def table(self, name: str = "s") -> list[tuple[float, str]]:
        return [((f.fire_time - T0).total_seconds(), f.outcome.value) for f in self.fires(name)]

    def finish(self, batch_id: str | None) -> None:
        """Every session of the batch ends (its worker sealed it)."""
        for session in self.ledger.sessions(batch_id=batch_id):
            with self.ledger.transaction() as tx:
                self.ledger.set_session_status(
                    tx, session.session_id, SessionStatus.DONE, at=self.clock.now()
                )

    def running_batches(self) -> set[str]:
        unfinished = [SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING]
        return {s.batch_id for s in self.ledger.sessions(statuses=unfinished) if s.batch_id}


def sweeper_for(world: World) -> Sweeper:
    """The beat sweeper over the world's ledger and queue (it publishes the pending outbox)."""
    return Sweeper(
        world.ledger,
        MemoryLeaseStore(world.clock.monotonic_ms),
        Dispatcher(world.ledger, world.queue, world.clock),
        world.clock,
    )
