"""``nahida schedule ...``: scheduled jobs (DESIGN.md section 8).

``add``, ``apply FILE`` (idempotent), ``list``, ``show NAME``, ``pause``,
``resume``, ``trigger`` (fire now), ``remove``, and ``run`` (tick in this
process: the embedded mode's beat, or one more ticker beside the fleet's
beats -- the ledger decides either way).  Schedules live in the ledger, so a
change takes effect at the next tick without restarting beat.

Errors are one line (exit 2 for a usage error or an unknown name, 3 when a
service is unreachable); ``--json`` prints machine-readable output; ids are
printed whole and a name or a unique id prefix is accepted back.
"""

import json
import sys
import time
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nahida_workers.cli.common import DEFAULT_DB, DbOpt, MaxRunningOpt, PriorityOpt

if TYPE_CHECKING:
    from nahida_workers.schedules.model import FireRecord, Schedule
    from nahida_workers.schedules.scheduler import Scheduler
    from nahida_workers.schedules.sql import SqlScheduleStore
    from nahida_workers.settings import Settings

# The schedule model, its timing (croniter) and the settings are imported by
# the commands that use them: `nahida --help` lists this group without them.


class OverlapChoice(StrEnum):
    """The ``--overlap`` values: :class:`nahida_workers.schedules.model.Overlap`'s.

    A test keeps the two equal.
    """

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"
    CANCEL_PREVIOUS = "cancel_previous"


def iso(value: datetime) -> str:
    """:func:`nahida_workers.schedules.timing.iso`, imported on first use."""
    from nahida_workers.schedules import timing

    return timing.iso(value)


__all__ = ["schedule_app"]

schedule_app = typer.Typer(
    no_args_is_help=True,
    help="Scheduled jobs: a job over repositories on a cron expression or an interval.",
)
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

LocalOpt = Annotated[
    bool, typer.Option("--local", help="Embedded mode: SQLite ledger file, in-process workers.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
NameArg = Annotated[str, typer.Argument(help="Schedule name (or a unique prefix of its id).")]


def _settings(local: bool, db: Path) -> "Settings":
    # The shared loader records the service URLs, so an infrastructure error
    # names the URL in use (it said "(unset)" for every schedule command).
    from nahida_workers.cli.common import settings_for

    return settings_for(local, db)


def _store(settings: "Settings") -> "SqlScheduleStore":
    from nahida_workers.ledger.migrate import upgrade
    from nahida_workers.ledger.sql import make_engine
    from nahida_workers.schedules.sql import SqlScheduleStore

    engine = make_engine(settings.database_url)
    upgrade(engine)  # schedules arrived with migration 0006
    return SqlScheduleStore(engine)


def _find(store: "SqlScheduleStore", ref: str, *, removed: bool = False) -> "Schedule":
    from nahida_workers.schedules.views import find_schedule

    return find_schedule(store, ref, removed=removed)


def _scheduler(settings: "Settings") -> tuple["Scheduler", Any]:
    """A scheduler over a fleet publishing through a Celery app of ``settings``; and the app."""
    from nahida_workers.celery import CeleryTaskQueue, make_celery
    from nahida_workers.runtime.wiring import build_fleet
    from nahida_workers.schedules.scheduler import build_scheduler

    celery_app = make_celery(settings)
    fleet = build_fleet(settings, CeleryTaskQueue(celery_app), migrate=True)
    return build_scheduler(fleet), celery_app


def _next(schedule: "Schedule", now: datetime) -> datetime | None:
    from nahida_workers.schedules.views import next_fire_of

    return next_fire_of(schedule, now)


def _fire_json(fire: "FireRecord") -> dict[str, Any]:
    from nahida_workers.schedules.views import fire_json

    return fire_json(fire)


def _schedule_json(
    schedule: "Schedule", fires: "list[FireRecord]", now: datetime
) -> dict[str, Any]:
    from nahida_workers.schedules.views import schedule_json

    return schedule_json(schedule, fires, now)


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="A new schedule name (letters, digits, . _ -).")],
    job: Annotated[Path, typer.Option("--job", help="Job file (YAML).")],
    cron: Annotated[str | None, typer.Option(help='Cron expression, e.g. "0 3 * * *".')] = None,
    every: Annotated[
        str | None, typer.Option(help="Interval instead of cron: 30s, 10m, 1h.")
    ] = None,
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of the cron expression.")] = "UTC",
    repo: Annotated[list[Path], typer.Option("--repo", help="A repository (repeatable).")] = [],  # noqa: B006
    repos_from: Annotated[
        Path | None, typer.Option("--repos-from", help="File with one path per line.")
    ] = None,
    overlap: Annotated[
        OverlapChoice,
        typer.Option(help="While the previous fire still runs: skip, buffer_one, ..."),
    ] = OverlapChoice.SKIP,
    catchup_window: Annotated[
        str, typer.Option("--catchup-window", help="Run fires missed by at most this (5m, 1h).")
    ] = "5m",
    jitter: Annotated[str, typer.Option(help="Delay each fire by up to this (30s).")] = "0s",
    priority: PriorityOpt = None,
    max_running: MaxRunningOpt = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Add a schedule: JOB over the repositories on a cron expression or an interval."""
    from nahida_workers.runtime.dispatch.dispatcher import new_id
    from nahida_workers.schedules.config import build_definition
    from nahida_workers.schedules.model import Overlap

    settings = _settings(local, db)
    definition = build_definition(
        name=name,
        job=job,
        repos=repo,
        repos_from=repos_from,
        cron=cron,
        every=every,
        timezone=tz,
        overlap=Overlap(overlap.value),
        catchup_window=catchup_window,
        jitter=jitter,
        priority=priority,
        max_running=max_running,
        settings=settings,
    )
    store = _store(settings)
    if store.get(name) is not None:
        from nahida_workers.errors import UserError

        raise UserError(
            f"schedule {name} exists; remove it first, or declare it in a file and apply"
        )
    now = _now()
    schedule, _ = store.put(definition, schedule_id=new_id(), at=now)
    upcoming = _next(schedule, now)
    console.print(
        f"schedule {escape(name)} added: {schedule.schedule_id}  "
        f"{escape(definition.trigger_text())}  next fire {iso(upcoming) if upcoming else '-'}"
    )


@schedule_app.command("apply")
def apply(
    file: Annotated[Path, typer.Argument(help="A schedules file (config/schedules.yaml).")],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Create or update every schedule the file declares (idempotent; removes none)."""
    from nahida_workers.runtime.dispatch.dispatcher import new_id
    from nahida_workers.schedules.config import load_schedules_file

    settings = _settings(local, db)
    definitions = load_schedules_file(file, settings)
    store = _store(settings)
    now = _now()
    results = []
    for definition in definitions:
        schedule, change = store.put(definition, schedule_id=new_id(), at=now)
        results.append(
            {"name": schedule.name, "schedule_id": schedule.schedule_id, "change": change.value}
        )
    if as_json:
        console.print_json(json.dumps(results))
        return
    for row in results:
        console.print(f"{row['change']:<9} {escape(row['name'])}  {row['schedule_id']}")


RemovedOpt = Annotated[
    bool, typer.Option("--removed", help="Removed schedules (their fires stay in the ledger).")
]


@schedule_app.command("list")
def list_(
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    removed: RemovedOpt = False,
) -> None:
    """Every schedule: state, trigger, last fire and its outcome, next fire (--removed: those)."""
    store = _store(_settings(local, db))
    now = _now()
    schedules = store.removed() if removed else store.live()
    rows = [_schedule_json(s, store.fires(s.schedule_id, limit=1), now) for s in schedules]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="schedules")
    for column in ("name", "schedule id", "state", "trigger", "overlap", "last fire", "next fire"):
        table.add_column(column, overflow="fold")
    for row in rows:
        last = row["last_fire"]
        table.add_row(
            escape(row["name"]),
            row["schedule_id"],
            row["state"],
            escape(row["trigger"]),
            row["definition"]["overlap"],
            f"{last['fire_time']} {last['outcome']}" if last else "-",
            row["next_fire"] or "-",
        )
    console.print(table)


@schedule_app.command("show")
def show(
    name: NameArg,
    fires: Annotated[int, typer.Option(min=1, help="How many of the newest fires.")] = 20,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    removed: Annotated[
        bool,
        typer.Option(
            "--removed",
            help="A removed schedule (by name: the latest removed under it; or by id) "
            "and its fires.",
        ),
    ] = False,
) -> None:
    """A schedule and its newest fires: each decision, its batch, who decided it, its tokens."""
    from nahida_workers.cli.common import ledger_for
    from nahida_workers.schedules.views import fires_with_usage
    from nahida_workers.spend import prices_of

    settings = _settings(local, db)
    store = _store(settings)
    schedule = _find(store, name, removed=removed)
    history = store.fires(schedule.schedule_id, limit=fires)
    data = _schedule_json(schedule, history, _now())
    prices = prices_of(settings)
    data["fires"] = fires_with_usage(ledger_for(settings), history, prices)
    if as_json:
        console.print_json(json.dumps(data, default=str))
        return
    d = schedule.definition
    console.print(
        f"schedule {escape(d.name)} {schedule.schedule_id} ({data['state']})\n"
        f"  job {escape(str(data['job']))} from {escape(str(d.job_path or 'inline'))}, "
        f"{len(d.repos)} repositories\n"
        f"  {escape(d.trigger_text())}, overlap {d.overlap.value}, "
        f"catch-up window {d.catchup_window_s:g}s, jitter {d.jitter_s:g}s\n"
        f"  next fire {data['next_fire'] or '-'}"
    )
    table = Table(title=f"fires (newest {fires})")
    columns = ["fire time", "kind", "outcome", "batch id", "late s", "decided by", "detail"]
    columns += ["tokens in", "out"] + (["cost $"] if prices is not None else [])
    for column in columns:
        table.add_column(column, overflow="fold")
    for fire, shown in zip(history, data["fires"], strict=True):
        detail = {k: v for k, v in fire.detail.items() if k != "late_s"}
        usage = shown["usage"] or {}
        cost = usage.get("cost_usd")
        cells = [
            iso(fire.fire_time),
            fire.kind.value,
            fire.outcome.value,
            fire.batch_id or "-",
            str(fire.detail.get("late_s", "-")),
            escape(fire.decided_by),
            escape(json.dumps(detail)) if detail else "",
            f"{usage['input_tokens']:,}" if usage else "-",
            f"{usage['output_tokens']:,}" if usage else "-",
        ]
        if prices is not None:  # a cost column only with a price table
            cells.append("?" if cost is None else f"{cost:.4f}")
        table.add_row(*cells)
    console.print(table)


def _set_paused(name: str, paused: bool, local: bool, db: Path) -> None:
    store = _store(_settings(local, db))
    schedule = store.set_paused(_find(store, name).name, paused, at=_now())
    word = "paused" if paused else "resumed"
    console.print(f"schedule {escape(schedule.name)} {word}: {schedule.schedule_id}")


@schedule_app.command("pause")
def pause(name: NameArg, local: LocalOpt = False, db: DbOpt = DEFAULT_DB) -> None:
    """Stop firing until resumed (a trigger still fires)."""
    _set_paused(name, True, local, db)


@schedule_app.command("resume")
def resume(name: NameArg, local: LocalOpt = False, db: DbOpt = DEFAULT_DB) -> None:
    """Fire again from now on; fire times that passed while paused are not run."""
    _set_paused(name, False, local, db)


@schedule_app.command("remove")
def remove(name: NameArg, local: LocalOpt = False, db: DbOpt = DEFAULT_DB) -> None:
    """Remove a schedule (its fires and batches stay in the ledger)."""
    store = _store(_settings(local, db))
    schedule = store.remove(_find(store, name).name, at=_now())
    console.print(f"schedule {escape(schedule.name)} removed: {schedule.schedule_id}")


@schedule_app.command("trigger")
def trigger(
    name: NameArg,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    wait: Annotated[
        float, typer.Option(help="--local: seconds to run the fire's sessions in-process.")
    ] = 600.0,
) -> None:
    """Fire now, under the schedule's overlap policy; prints the outcome and the batch id.

    Distributed, the fleet's workers run the sessions (``nahida status BATCH_ID``);
    with ``--local`` they run in this process until done (or ``--wait`` seconds).
    """
    from nahida_workers.schedules.scheduler import TickReport

    settings = _settings(local, db)
    store = _store(settings)
    schedule = _find(store, name)
    scheduler, celery_app = _scheduler(settings)
    # The broker down after the ledger recorded a session is "recorded, will
    # be delivered" (exit 4, from report.deferred), not a warning and exit 0.
    report = TickReport()
    if local:
        from nahida_workers.celery import embedded_worker

        with embedded_worker(celery_app):
            fire = scheduler.trigger(schedule.name, report=report)
            if fire.batch_id is not None:
                _wait_batch(scheduler, fire.batch_id, wait)
    else:
        fire = scheduler.trigger(schedule.name, report=report)
    deferred = sum(n for _fire, n in report.deferred)
    fired = f"schedule {schedule.name} fired at {iso(fire.fire_time)}"
    if as_json:
        console.print_json(json.dumps({**_fire_json(fire), "undelivered_sessions": deferred}))
    elif not deferred:
        batch = f"  batch {fire.batch_id}" if fire.batch_id else ""
        console.print(f"{fired}: {fire.outcome.value}{batch}", markup=False)
    if deferred:
        raise _recorded(fired, fire.batch_id or "", deferred, settings, quiet=as_json)


def _recorded(
    fired: str, batch_id: str, deferred: int, settings: "Settings", *, quiet: bool
) -> typer.Exit:
    """The fire's sessions are in the ledger, not on the broker: say so (one line), exit 4."""
    from nahida_workers.cli.exits import ExitCode, redact_url

    line = (
        f"{fired}: batch {batch_id}: {deferred} session(s) recorded; will be delivered when "
        f"the broker is back ({redact_url(settings.broker_url)}, NAHIDA_BROKER_URL, is "
        "unreachable; celery beat's sweeper publishes them). Do not repeat it: follow it "
        f"with `nahida status {batch_id}`."
    )
    # On stderr, as every command's "recorded; will be delivered" notice
    # (with --json the JSON document alone is stdout).
    err.print(line, markup=False, soft_wrap=True)
    return typer.Exit(ExitCode.RECORDED)


def _wait_batch(scheduler: "Scheduler", batch_id: str, timeout_s: float) -> None:
    from nahida_workers.core.events import SessionStatus

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sessions = scheduler.ledger.sessions(batch_id=batch_id)
        if sessions and all(s.status is SessionStatus.DONE for s in sessions):
            return
        time.sleep(0.2)


@schedule_app.command("run")
def run(
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    seconds: Annotated[
        float | None, typer.Option("--for", min=0.1, help="Stop after this many seconds.")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="--local: session-worker threads.")] = 4,
) -> None:
    """Tick in this process every NAHIDA_SCHEDULE_TICK_S and print each decision.

    With ``--local`` this is the embedded fleet's beat, and the fires' sessions
    run in this process.  Distributed it is one more ticker beside beat (safe:
    the ledger decides each fire once).  Ctrl-C stops it.
    """
    settings = _settings(local, db)
    scheduler, celery_app = _scheduler(settings)
    live = scheduler.store.live()
    listed = ", ".join(sorted(s.name for s in live if not s.paused)) or "no active schedules"
    paused = sorted(s.name for s in live if s.paused)
    if paused:  # a paused schedule is not run: never listed as ticking
        listed += f" (paused, not run: {', '.join(paused)})"
    err.print(f"ticking every {settings.schedule_tick_s:g}s: {escape(listed)}")
    if local:
        from nahida_workers.celery import embedded_worker

        with embedded_worker(celery_app, concurrency=workers):
            _tick_loop(scheduler, settings.schedule_tick_s, seconds)
    else:
        _tick_loop(scheduler, settings.schedule_tick_s, seconds)


def _tick_loop(scheduler: "Scheduler", every_s: float, seconds: float | None) -> None:
    from nahida_workers.schedules.model import FireOutcome

    deadline = None if seconds is None else time.monotonic() + seconds
    while deadline is None or time.monotonic() < deadline:
        report = scheduler.tick()
        names = {s.schedule_id: s.name for s in scheduler.store.live()}
        shown = [f for f in report.decided if f.outcome is not FireOutcome.DISPATCHING]
        for fire in sorted([*shown, *report.dispatched], key=lambda f: f.fire_time):
            name = names.get(fire.schedule_id, fire.schedule_id)
            outcome = "dispatched" if fire in report.dispatched else fire.outcome.value
            console.print(
                f"{iso(fire.fire_time)}  {escape(name)}  {outcome}"
                + (f"  batch {fire.batch_id}" if fire.batch_id else "")
            )
        for error in report.errors:
            err.print(f"[yellow]not dispatched yet[/]: {escape(error)}")
        time.sleep(
            every_s if deadline is None else max(0.0, min(every_s, deadline - time.monotonic()))
        )


def _now() -> datetime:
    from nahida_workers.ports import SystemClock

    return SystemClock().now()
