"""``nahida batch``: one session per repository, dispatched, watched, reported.

The job is validated before anything is dispatched (its provider is built,
its tools resolved, and a scripted provider's calls checked against them), so
a typo is a usage error, not a session that never ends.  Sessions get the
idempotency key ``{batch_id}:{repo}``: ``--resume BATCH_ID`` finds the
sessions an interrupted batch already created, runs none of them twice, and
re-publishes the ones not finished; it refuses a different job or repository
list (the batch row records both).

What the user is told:

* the broker is down after the ledger recorded the sessions: "recorded; will
  be delivered when the broker is back" (exit 4), never "unreachable";
* no worker consumes the ``sessions`` queue within :data:`NO_WORKER_AFTER_S`:
  said once, with the command that starts one;
* ``--timeout``: exit 5 and the ``--resume`` hint;
* Ctrl-C (:mod:`nahida_workers.cli.interrupt`): the right count, exit 130
  within 2 s; a second Ctrl-C exits at once;
* a ledger outage shorter than ``NAHIDA_LEDGER_OUTAGE_S`` is ridden out like
  the workers do (:mod:`nahida_workers.runtime.commits.outage`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from nahida_workers.cli.exits import ExitCode, is_delivery_failure, redact_url
from nahida_workers.cli.interrupt import exit_now, run_interruptible, stop_in_flight
from nahida_workers.cli.report import batch_report
from nahida_workers.constants import BATCH_GROUP_TEMPLATE
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import UserError
from nahida_workers.runtime.agents.discover import with_agents
from nahida_workers.runtime.commits.outage import read_through_outage
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher, PublishDeferred, RecordOnlyQueue
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.spec import JobSpec, SessionSpec
from nahida_workers.runtime.wiring import Fleet, build_fleet
from nahida_workers.settings import SESSIONS_QUEUE, Settings

__all__ = ["BatchOptions", "check_resume", "run_batch"]

#: Seconds between two reads of the batch's progress.
POLL_S = 0.2
#: Seconds after which a distributed batch none of whose sessions started
#: checks whether any worker consumes the ``sessions`` queue.
NO_WORKER_AFTER_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True)
class BatchOptions:
    """What ``nahida batch`` was asked to do."""

    job: JobSpec
    repos: list[Path]
    local: bool
    workers: int
    timeout_s: float
    report: Path | None
    resume: str | None


def _validate(
    spec: SessionSpec, settings: Settings, repos: Sequence[Path] = ()
) -> dict[Path, SessionSpec]:
    """Build the provider and the tools once: a config error stops here (exit 2).

    A scripted provider whose turns call a tool the job does not offer (a
    typo like ``Glb``) is the same usage error as an unknown tool in the
    tools list (``runtime/dispatch/preflight.py``, shared with schedules and the API).
    The config folder's agent definitions, and each repository's when the
    job trusts its workspace, are merged in and checked here too
    (``runtime/agents/discover.py``).

    Returns:
        The session spec of each repository.

    Raises:
        ConfigError: an unknown tool, an invalid provider, a script calling a
            tool that is not offered, a broken agent definition (naming its file).
    """
    if not spec.trust_workspace:
        base = with_agents(spec, settings=settings)
        check_spec(base, settings)
        return {path: base for path in repos}
    # Each repository may define the agents its script starts: check each merge.
    specs: dict[Path, SessionSpec] = {}
    checked: list[SessionSpec] = []
    for path in repos:
        merged = with_agents(spec, settings=settings, workspace=path)
        if merged not in checked:
            check_spec(merged, settings)
            checked.append(merged)
        specs[path] = merged
    return specs


def batch_spec(options: BatchOptions) -> dict[str, Any]:
    """What the batch row records: the job and the repository list (for ``--resume``)."""
    return {
        "job": options.job.model_dump(mode="json"),
        "repos": [str(p) for p in options.repos],
    }


def check_resume(recorded: dict[str, Any], options: BatchOptions, batch_id: str) -> None:
    """Refuse ``--resume`` with a different job or repository list.

    Raises:
        UserError: the job or the repositories differ from the batch's (the
            message names what differs).
    """
    wanted = batch_spec(options)
    job = _current(recorded.get("job", recorded))  # older batches recorded the job only
    wanted_job = _current(wanted["job"])
    if job != wanted_job:
        keys = sorted(k for k in set(job) | set(wanted_job) if job.get(k) != wanted_job.get(k))
        raise UserError(
            f"--resume {batch_id}: the job differs from the batch's ({', '.join(keys)}); "
            "resume with the job file the batch started with"
        )
    repos = recorded.get("repos")
    if repos is not None and sorted(repos) != sorted(wanted["repos"]):
        added = len(set(wanted["repos"]) - set(repos))
        missing = len(set(repos) - set(wanted["repos"]))
        raise UserError(
            f"--resume {batch_id}: the repository list differs from the batch's "
            f"({added} added, {missing} missing); resume with the same --repo/--repos-from"
        )


#: Job fields ``--resume`` may change: how the rest is scheduled, not what it does.
RESCHEDULABLE = frozenset({"priority", "max_running"})


def _current(job: dict[str, Any]) -> dict[str, Any]:
    """A job as compared by ``--resume``: as this version dumps it, without :data:`RESCHEDULABLE`.

    Fields added since an older batch recorded its job get their defaults.
    """
    try:
        job = JobSpec.model_validate(job).model_dump(mode="json")
    except ValueError:  # no longer valid: compared as recorded (and so refused)
        pass
    return {k: v for k, v in job.items() if k not in RESCHEDULABLE}


def run_batch(options: BatchOptions, settings: Settings, console: Console, err: Console) -> int:
    """Run (or resume) a batch; returns the exit code (:class:`ExitCode`)."""
    from nahida_workers.celery import CeleryTaskQueue, embedded_worker, make_celery
    from nahida_workers.worker_secrets import scrub_process_environment

    specs = _validate(options.job.session_spec(), settings, options.repos)
    celery_app = make_celery(settings)
    fleet = build_fleet(settings, CeleryTaskQueue(celery_app), migrate=True)
    started = datetime.now(UTC)
    batch_id = _open_batch(fleet, options, settings)
    err.print(f"batch {batch_id}: {len(options.repos)} repositories", markup=False)

    def consumers() -> int:
        replies = celery_app.control.inspect(timeout=1.0).active_queues() or {}
        return sum(
            1 for queues in replies.values() if any(q.get("name") == SESSIONS_QUEUE for q in queues)
        )

    def work() -> int:
        deferred = _dispatch_all(fleet, specs, options, batch_id, settings)
        if deferred:
            return _recorded(fleet, batch_id, deferred, settings, err)
        return _wait(
            fleet, batch_id, options, settings, err, consumers=None if options.local else consumers
        )

    def body() -> int:
        return run_interruptible(
            work,
            fleet=fleet,
            batch_id=batch_id,
            total=len(options.repos),
            local=options.local,
            err=err,
        )

    if options.local:
        # Tools run in this process: its secrets leave its environment first.
        scrub_process_environment()
        with embedded_worker(celery_app, concurrency=options.workers):
            code = body()
            if code == ExitCode.TIMED_OUT:
                # As Ctrl-C does (cli/interrupt.py): fence and stop the sessions
                # in flight (--resume settles their calls: interrupted, outcome
                # unknown), report, and leave without waiting for the worker
                # threads -- their shutdown took seconds and logged warnings.
                stop_in_flight(fleet, batch_id, fence=True)
                code = _conclude(code, fleet, batch_id, started, options, settings, console)
                exit_now(code)
    else:
        code = body()
    return _conclude(code, fleet, batch_id, started, options, settings, console)


def _conclude(
    code: int,
    fleet: Fleet,
    batch_id: str,
    started: datetime,
    options: BatchOptions,
    settings: Settings,
    console: Console,
) -> int:
    """Write the report, print the table and the summary; returns the final exit code."""
    from nahida_workers.spend import prices_of

    prices = prices_of(settings)
    data = _read(
        settings,
        lambda: batch_report(fleet.ledger, batch_id, started_at=started, prices=prices),
    )
    path = options.report or Path("reports") / f"batch-{batch_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", "utf-8")
    from nahida_workers.cli import render

    console.print(render.batch_table(data, width=console.width))
    console.print(f"{render.summary_sentence(data)} Report: {path}", markup=False)
    if code in (ExitCode.TIMED_OUT, ExitCode.RECORDED, ExitCode.INTERRUPTED):
        return code
    return ExitCode.OK if data["all_completed"] else ExitCode.NOT_COMPLETED


def _read(settings: Settings, read: Callable[[], T]) -> T:
    """A ledger read that rides out an outage as long as the workers do."""
    return read_through_outage(read, within_s=settings.ledger_outage_s)


def _open_batch(fleet: Fleet, options: BatchOptions, settings: Settings) -> str:
    """Create the batch (or find the one to resume) and set its concurrency cap."""
    if options.resume is None:
        batch_id = fleet.dispatcher.create_batch(options.job.name, batch_spec(options)).batch_id
    else:
        from nahida_workers.cli.ids import resolve

        batch_id = resolve(fleet.ledger, "batch", options.resume)
        record = fleet.ledger.get_batch(batch_id)
        assert record is not None  # resolve found it
        check_resume(record.spec, options, batch_id)
    # The embedded fleet serves this batch alone: its --workers is the cap
    # unless the job or --max-running names one.
    cap = options.job.cap(0 if options.local else settings.max_running_default)
    _read(settings, lambda: fleet.dispatcher.set_cap(batch_group(batch_id), cap))
    return batch_id


def batch_group(batch_id: str) -> str:
    """The admission group of a batch's sessions (``batch:<id>``)."""
    return BATCH_GROUP_TEMPLATE.format(batch_id=batch_id)


def _dispatch_all(
    fleet: Fleet,
    specs: dict[Path, SessionSpec],
    options: BatchOptions,
    batch_id: str,
    settings: Settings,
) -> int:
    """Record and publish a session per repository; returns how many wait for the broker.

    One at a time through the dispatcher's batch path (``submit_all``), so a
    broker failure is known per session and the rest is still recorded.
    """
    dispatcher = fleet.dispatcher
    deferred = 0
    for path in options.repos:

        def submit(dispatcher: Dispatcher = dispatcher, path: Path = path) -> Any:
            # Idempotent by its key: a retry after an outage finds the session.
            return dispatcher.submit_all(
                specs[path],
                [str(path)],
                batch_id=batch_id,
                key=lambda ws: f"{batch_id}:{ws}",
                priority=options.job.priority,
                admission_group=batch_group(batch_id),
            )[0]

        try:
            session, created = _read(settings, submit)
            if not created and session.status is not SessionStatus.DONE:
                dispatcher.redispatch(session.session_id)  # resumed: publish it again
        except PublishDeferred:
            deferred += 1
        except Exception as exc:
            if not is_delivery_failure(exc):
                raise
            # Recorded, not published: the rest is recorded without trying the broker.
            deferred += 1
            dispatcher = Dispatcher(fleet.ledger, RecordOnlyQueue(), fleet.clock)
    return deferred


def _recorded(
    fleet: Fleet, batch_id: str, deferred: int, settings: Settings, console: Console
) -> int:
    console.print(
        f"batch {batch_id}: {deferred} session(s) recorded; will be delivered when the broker "
        f"is back ({redact_url(settings.broker_url)}, NAHIDA_BROKER_URL, is unreachable; "
        "celery beat's sweeper publishes them). Do not re-run the batch: follow it with "
        f"`nahida status {batch_id}`.",
        markup=False,
        soft_wrap=True,  # one line at any width: scripts grep it
    )
    return ExitCode.RECORDED


def _wait(
    fleet: Fleet,
    batch_id: str,
    options: BatchOptions,
    settings: Settings,
    err: Console,
    *,
    consumers: Callable[[], int] | None,
) -> int:
    """Show progress until every session is done; :attr:`ExitCode.TIMED_OUT` on timeout."""
    total = len(options.repos)
    started = time.monotonic()
    deadline = started + options.timeout_s
    checked_workers = consumers is None
    batch = fleet.ledger.get_batch(batch_id)
    # The bar's clock is the batch's: a resumed batch shows its whole age.
    origin = batch.created_at if batch is not None else datetime.now(UTC)
    with Progress(
        TextColumn("sessions"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[age]}"),
        console=err,
    ) as progress:
        task = progress.add_task("sessions", total=total, age="")
        while True:
            sessions = _read(settings, lambda: fleet.ledger.sessions(batch_id=batch_id))
            # Child sessions (Task calls) share the batch id; one repo is one top-level session.
            sessions = [s for s in sessions if s.parent_id is None]
            done = sum(1 for s in sessions if s.status is SessionStatus.DONE)
            age = (datetime.now(UTC) - origin).total_seconds()
            progress.update(task, completed=done, age=_clock(age))
            if done >= total:
                return ExitCode.OK
            now = time.monotonic()
            if not checked_workers and now - started > NO_WORKER_AFTER_S:
                checked_workers = True
                if all(s.status is SessionStatus.QUEUED for s in sessions) and _no_consumer(
                    consumers
                ):
                    progress.console.print(
                        "[yellow]no worker is consuming the 'sessions' queue[/] "
                        f"({escape(redact_url(settings.broker_url))}): start one with "
                        "`celery -A tasks worker -Q sessions --pool threads -c 8`; "
                        "the batch waits for it"
                    )
            if now > deadline:
                progress.console.print(
                    f"[yellow]timed out after {options.timeout_s:g}s with {done}/{total} "
                    f"sessions done[/]; nothing is lost -- run the same command with "
                    f"--resume {batch_id} to continue"
                )
                return ExitCode.TIMED_OUT
            time.sleep(POLL_S)


def _no_consumer(consumers: Callable[[], int] | None) -> bool:
    if consumers is None:
        return False
    try:
        return consumers() == 0
    except Exception:  # the check is advice; the batch goes on without it
        return False


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
