"""The tick: find due fires, let the ledger decide, dispatch through the batch path.

One :meth:`Scheduler.tick` (the beat task, every ``NAHIDA_SCHEDULE_TICK_S``):

1. for each live schedule, read its open fires; a dispatched fire whose
   sessions are all done is marked finished (it no longer overlaps);
2. :func:`~nahida_workers.schedules.policy.plan_tick` decides the due fire
   times (pure, ``now`` as an argument);
3. :meth:`ScheduleStore.commit_plan` commits the plan behind a
   compare-and-set on the schedule's version -- of two beats planning the
   same fire, one commits and the other writes nothing;
4. the winner cancels what ``cancel_previous`` stops and dispatches each
   claimed fire through :meth:`Dispatcher.submit_all` -- the same path as
   ``nahida batch`` -- as the batch :func:`fire_batch_id`, one session per
   repository under the idempotency key schedule id + fire time + repository,
   at the job's priority and under one concurrency cap across all the
   schedule's fires (admission group ``schedule:<id>``);
5. a claimed fire whose dispatch did not finish (a crash, the ledger down)
   is re-driven by a later tick after :data:`REDRIVE_AFTER_S`: the dispatch
   is idempotent, so a fire is never dispatched twice.

Every decision is a ``schedule_fires`` row; every final outcome is counted
in ``nahida_schedule_fires_total{schedule, outcome}``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from nahida_workers.constants import DEFAULT_MAX_RUNNING, SCHEDULE_GROUP_TEMPLATE
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import (
    ConfigError,
    LedgerIntegrityError,
    NotFoundError,
    RunError,
    UserError,
)
from nahida_workers.ports import Clock, LedgerReader
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher, PublishDeferred, RecordOnlyQueue
from nahida_workers.runtime.spec import JobSpec, SessionSpec
from nahida_workers.schedules.model import FireOutcome, FireRecord, Schedule
from nahida_workers.schedules.policy import Plan, plan_tick, plan_trigger, session_key
from nahida_workers.schedules.store import REMOVED_ERROR, ScheduleStore
from nahida_workers.schedules.timing import iso

if TYPE_CHECKING:
    from nahida_workers.runtime.wiring import Fleet

__all__ = [
    "MAX_DISPATCH_ATTEMPTS",
    "REDRIVE_AFTER_S",
    "Scheduler",
    "TickReport",
    "build_scheduler",
    "count_fire",
    "ticker_name",
]

log = logging.getLogger(__name__)

#: Seconds a claimed fire may stay ``dispatching`` before another tick re-drives it.
REDRIVE_AFTER_S = 30.0
#: Dispatch attempts before a fire is recorded ``failed``.
MAX_DISPATCH_ATTEMPTS = 5
#: Session statuses that mean a fire's sessions still run.
UNFINISHED = (SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING)


def ticker_name() -> str:
    """``host:pid`` of this process: who decided a fire (shown by ``schedule show``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def count_fire(schedule: str, outcome: FireOutcome) -> None:
    """Increment ``nahida_schedule_fires_total`` (DESIGN.md section 8)."""
    from nahida_workers.metrics import SCHEDULE_FIRES

    SCHEDULE_FIRES.labels(schedule=schedule, outcome=outcome.value).inc()


@dataclass
class TickReport:
    """What one tick did (the beat task's result; Flower shows it)."""

    decided: list[FireRecord] = field(default_factory=list)
    dispatched: list[FireRecord] = field(default_factory=list)
    failed: list[FireRecord] = field(default_factory=list)
    lost_race: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Dispatched fires with sessions recorded but not yet published (the
    #: broker was down; the sweeper publishes them): ``(fire, how many)``.
    deferred: list[tuple[FireRecord, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary: dispatched fires with their batches, counts of the other outcomes."""
        counts: dict[str, int] = {}
        for fire in self.decided:
            if fire.outcome is not FireOutcome.DISPATCHING:
                counts[fire.outcome.value] = counts.get(fire.outcome.value, 0) + 1
        return {
            "dispatched": [
                {
                    "schedule_id": f.schedule_id,
                    "fire_time": iso(f.fire_time),
                    "batch_id": f.batch_id,
                }
                for f in self.dispatched
            ],
            "decided": counts,
            "failed": [iso(f.fire_time) for f in self.failed],
            "lost_race": self.lost_race,
            "errors": self.errors,
            "deferred": {iso(f.fire_time): n for f, n in self.deferred},
        }


@dataclass
class Scheduler:
    """Drives the schedule policy over its ports.

    Attributes:
        cancel_session: stops one session (``Inbox.cancel``), for ``cancel_previous``.
        resolve: the session spec of one repository (its agent definitions
            merged in, ``runtime/agents/discover.py``); None: the job's as is.
        on_outcome: called once per final outcome this ticker recorded (metrics).
        max_running_default: the cap of a schedule whose job names no
            ``max_running`` (one cap across all its fires; 0 = none).

    A session whose publish fails after the ledger recorded it (the broker
    down) does not stop its fire, for a tick as for ``nahida schedule
    trigger`` (which exits 4): the fire's other sessions are recorded without
    publishing (:class:`RecordOnlyQueue`), the fire is ``dispatched`` with
    ``detail.undelivered`` and the sweeper publishes the pending outbox rows
    when the broker is back (DESIGN.md section 1), however long it is down.
    Only a failure before the record (the ledger down) leaves the fire
    ``dispatching`` for a re-drive.
    """

    store: ScheduleStore
    ledger: LedgerReader
    dispatcher: Dispatcher
    clock: Clock
    cancel_session: Callable[[str], object] | None = None
    resolve: Callable[[SessionSpec, str], SessionSpec] | None = None
    who: str = field(default_factory=ticker_name)
    on_outcome: Callable[[str, FireOutcome], None] = count_fire
    max_running_default: int = DEFAULT_MAX_RUNNING

    # -- the tick ---------------------------------------------------------------
    def tick(self) -> TickReport:
        """Decide and dispatch every due fire of every live schedule (see the module doc)."""
        now = self.clock.now()
        report = TickReport()
        for schedule in self.store.live():
            if schedule.paused:
                continue
            try:
                active, buffered = self._running(schedule, now)
                plan = plan_tick(schedule, now=now, active=active, buffered=buffered)
                self._perform(schedule, plan, now, report)
            except Exception as exc:  # one broken schedule must not stop the others
                log.exception("schedule %s: tick failed", schedule.name)
                report.errors.append(f"{schedule.name}: {type(exc).__name__}: {exc}"[:500])
        self._redrive(now, report)
        return report

    def trigger(self, name: str, *, report: TickReport | None = None) -> FireRecord:
        """Fire ``name`` now (``nahida schedule trigger``), under its overlap policy.

        ``report`` (optional) collects what the fire did: its errors, and in
        ``deferred`` the sessions recorded while the broker was down.

        Returns:
            The manual fire's row after its dispatch (``dispatched``,
            ``buffered``, ``skipped_overlap`` or ``failed``).

        Raises:
            NotFoundError: no live schedule ``name``.
            RunError: ticks kept deciding first (retryable).
        """
        for _ in range(10):
            schedule = self.store.get(name)
            if schedule is None:
                raise NotFoundError(f"no schedule {name}")
            now = self.clock.now()
            active, buffered = self._running(schedule, now)
            plan = plan_trigger(schedule, now=now, active=active, buffered=buffered)
            written = self._perform(
                schedule, plan, now, report if report is not None else TickReport()
            )
            if written is not None:
                fire_time = plan.decisions[0].fire_time
                found = self.store.get_fire(schedule.schedule_id, fire_time)
                if found is None:
                    raise RunError(f"fire {iso(fire_time)} of {name} was decided elsewhere")
                return found
        raise RunError(f"schedule {name} is busy; try again", retryable=True)

    # -- steps ------------------------------------------------------------------
    def _running(self, schedule: Schedule, now: datetime) -> tuple[list[datetime], list[datetime]]:
        """Fire times still running and buffered; finished ones are marked so on the way."""
        active: list[datetime] = []
        buffered: list[datetime] = []
        for fire in self.store.open_fires(schedule.schedule_id):
            if fire.outcome is FireOutcome.BUFFERED:
                buffered.append(fire.fire_time)
            elif fire.outcome is FireOutcome.DISPATCHED and not self._unfinished(fire):
                self.store.mark_finished(schedule.schedule_id, fire.fire_time, at=now)
            else:
                active.append(fire.fire_time)
        return active, buffered

    def _unfinished(self, fire: FireRecord) -> list[str]:
        if fire.batch_id is None:
            return []
        return [
            s.session_id for s in self.ledger.sessions(batch_id=fire.batch_id, statuses=UNFINISHED)
        ]

    def _perform(
        self, schedule: Schedule, plan: Plan, now: datetime, report: TickReport
    ) -> list[FireRecord] | None:
        if plan.empty:
            return []
        written = self.store.commit_plan(
            schedule.schedule_id, version=schedule.version, plan=plan, at=now, by=self.who
        )
        if written is None:
            report.lost_race.append(schedule.name)  # another tick decided these fires
            return None
        for fire in written:
            report.decided.append(fire)
            if fire.outcome in (FireOutcome.MISSED, FireOutcome.SKIPPED_OVERLAP):
                self.on_outcome(schedule.name, fire.outcome)
        for fire_time in plan.cancel:
            self._cancel(schedule, fire_time)
        for fire in written:
            if fire.outcome is FireOutcome.DISPATCHING:
                self._dispatch(schedule, fire, report)
        return written

    def _cancel(self, schedule: Schedule, fire_time: datetime) -> None:
        fire = self.store.get_fire(schedule.schedule_id, fire_time)
        if fire is None or self.cancel_session is None:
            return
        for session_id in self._unfinished(fire):
            try:
                self.cancel_session(session_id)
            except UserError:  # finished meanwhile: nothing to cancel
                pass

    def _dispatch(self, schedule: Schedule, fire: FireRecord, report: TickReport) -> None:
        sid, at = schedule.schedule_id, self.clock.now()
        before = len(report.deferred)
        try:
            self.dispatch_fire(schedule, fire, report=report)
        except UserError as exc:  # the stored job no longer validates: retrying cannot help
            self._fail(schedule, fire, f"{type(exc).__name__}: {exc}", report)
            return
        except Exception as exc:  # ledger or broker down: a later tick re-drives it
            message = f"{schedule.name} {iso(fire.fire_time)}: {type(exc).__name__}: {exc}"
            log.warning("schedule fire not dispatched (attempt %d): %s", fire.attempts, message)
            report.errors.append(message[:500])
            if fire.attempts >= MAX_DISPATCH_ATTEMPTS:
                self._fail(schedule, fire, message[:500], report)
            return
        undelivered = sum(n for _fire, n in report.deferred[before:])
        if self.store.mark_dispatched(sid, fire.fire_time, at=at, undelivered=undelivered):
            self.on_outcome(schedule.name, FireOutcome.DISPATCHED)
            report.dispatched.append(fire)

    def _fail(self, schedule: Schedule, fire: FireRecord, error: str, report: TickReport) -> None:
        if self.store.fail(schedule.schedule_id, fire.fire_time, error=error, at=self.clock.now()):
            self.on_outcome(schedule.name, FireOutcome.FAILED)
            report.failed.append(fire)

    def dispatch_fire(
        self, schedule: Schedule, fire: FireRecord, *, report: TickReport | None = None
    ) -> str:
        """Create the fire's batch (once) and one session per repository (once each).

        Idempotent: the batch id and every session key derive from the
        schedule id and the fire time, so a re-drive or a second ticker adds
        nothing.  The batch spec carries ``schedule`` (name, id, fire time),
        which the batch report shows.

        Returns:
            The batch id.  Sessions recorded but not published (the broker
            down, see the class doc) are added to ``report.deferred``.

        Raises:
            ConfigError: the stored job does not validate any more.
        """
        definition = schedule.definition
        try:
            job = JobSpec.model_validate(definition.job)
        except ValidationError as exc:
            raise ConfigError(f"schedule {schedule.name}: invalid job: {exc}") from None
        session = job.session_spec()
        # Each repository's own agent definitions (trust_workspace), all read
        # before anything is recorded: a broken one fails the fire whole.
        specs = {r: self.resolve(session, r) if self.resolve else session for r in definition.repos}
        batch_id = fire.batch_id
        assert batch_id is not None
        if self.ledger.get_batch(batch_id) is None:
            spec = {
                **job.model_dump(mode="json"),
                "schedule": {
                    "name": schedule.name,
                    "schedule_id": schedule.schedule_id,
                    "fire_time": iso(fire.fire_time),
                    "kind": fire.kind.value,
                },
            }
            try:
                self.dispatcher.create_batch(job.name, spec, batch_id=batch_id)
            except LedgerIntegrityError:  # a concurrent re-drive created it
                pass
        group = SCHEDULE_GROUP_TEMPLATE.format(schedule_id=schedule.schedule_id)
        self.dispatcher.set_cap(group, job.cap(self.max_running_default))
        deferred = self._submit(
            specs,
            definition.repos,
            batch_id,
            lambda repo: session_key(schedule.schedule_id, fire.fire_time, repo),
            priority=job.priority,
            group=group,
        )
        if deferred and report is not None:
            report.deferred.append((fire, deferred))
        return batch_id

    def _submit(
        self,
        specs: dict[str, SessionSpec],
        repos: Sequence[str],
        batch_id: str,
        key: Callable[[str], str],
        *,
        priority: int,
        group: str,
    ) -> int:
        """Record and publish one session per repository; returns how many wait to be published.

        A failure after the ledger recorded the session (the broker down)
        switches to recording the rest without publishing, as ``nahida
        batch`` does; any other failure propagates (a re-drive finishes the
        fire).
        """
        dispatcher, deferred = self.dispatcher, 0
        for repo in repos:
            try:
                dispatcher.submit_all(
                    specs[repo],
                    [repo],
                    batch_id=batch_id,
                    key=key,
                    priority=priority,
                    admission_group=group,
                )
            except PublishDeferred:
                deferred += 1
            except Exception as exc:
                if not self._recorded(batch_id, key(repo)):
                    raise
                log.info(  # not a warning: nothing is lost (the CLI says so in one line)
                    "batch %s: session %s recorded, not published (%s: %s); the rest of the "
                    "fire is recorded and the sweeper publishes it when the broker is back",
                    batch_id,
                    key(repo),
                    type(exc).__name__,
                    exc,
                )
                deferred += 1
                dispatcher = replace(self.dispatcher, queue=RecordOnlyQueue())
        return deferred

    def _recorded(self, batch_id: str, key: str) -> bool:
        """Whether the ledger holds the session ``key`` of ``batch_id`` (raises if it is down)."""
        return any(s.idempotency_key == key for s in self.ledger.sessions(batch_id=batch_id))

    def _redrive(self, now: datetime, report: TickReport) -> None:
        stale = self.store.stale_dispatching(older_than=now - timedelta(seconds=REDRIVE_AFTER_S))
        for fire in stale:
            schedule = self.store.get_by_id(fire.schedule_id)
            if not self.store.claim_redrive(
                fire.schedule_id, fire.fire_time, seen=fire.updated_at, at=now
            ):
                continue  # another ticker took it
            current = self.store.get_fire(fire.schedule_id, fire.fire_time)
            if current is None:
                continue
            if schedule is None or schedule.removed_at is not None:
                self._fail_removed(schedule, current, report)
            else:
                self._dispatch(schedule, current, report)

    def _fail_removed(
        self, schedule: Schedule | None, fire: FireRecord, report: TickReport
    ) -> None:
        """A removed schedule's stale fire is recorded failed, never dispatched."""
        name = schedule.name if schedule is not None else fire.schedule_id
        if self.store.fail(
            fire.schedule_id, fire.fire_time, error=REMOVED_ERROR, at=self.clock.now()
        ):
            self.on_outcome(name, FireOutcome.FAILED)
            report.failed.append(fire)


def build_scheduler(fleet: Fleet) -> Scheduler:
    """A scheduler on a worker's (or the CLI's) fleet: its ledger engine, dispatcher, inbox."""
    from pathlib import Path

    from nahida_workers.runtime.agents.discover import with_agents
    from nahida_workers.schedules.sql import SqlScheduleStore

    def resolve(spec: SessionSpec, repo: str) -> SessionSpec:
        if not spec.trust_workspace:
            return spec
        return with_agents(spec, settings=fleet.settings, workspace=Path(repo), config=False)

    return Scheduler(
        store=SqlScheduleStore(fleet.ledger.engine),
        ledger=fleet.ledger,
        dispatcher=fleet.dispatcher,
        clock=fleet.clock,
        cancel_session=fleet.inbox.cancel,
        resolve=resolve,
        max_running_default=fleet.settings.max_running_default,
    )
