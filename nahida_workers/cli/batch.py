"""``nahida batch``: one session per repository, dispatched, watched, reported.

The job is validated before anything is dispatched (its provider is built and
its tools resolved), so a typo is a usage error, not a session that never
ends.  Sessions get the idempotency key ``{batch_id}:{repo}``: ``--resume
BATCH_ID`` finds the sessions an interrupted batch already created, runs none
of them twice, and re-publishes the ones not finished.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from nahida_workers.cli.report import batch_report
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import NotFoundError
from nahida_workers.runtime.spec import JobSpec, SessionSpec
from nahida_workers.runtime.wiring import Fleet, build_fleet, provider_for, registry_for
from nahida_workers.settings import Settings

__all__ = ["BatchOptions", "run_batch"]

#: Seconds between two reads of the batch's progress.
POLL_S = 0.2


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


def _validate(spec: SessionSpec, settings: Settings) -> None:
    """Build the provider and the tools once: a config error stops here (exit 2)."""
    registry_for(spec, settings)
    close = getattr(provider_for(spec), "close", None)
    if callable(close):
        close()


def run_batch(options: BatchOptions, settings: Settings, console: Console, err: Console) -> int:
    """Run (or resume) a batch; returns the exit code (0 iff every session completed)."""
    from nahida_workers.worker_secrets import scrub_process_environment
    from tasks.app import CeleryTaskQueue, configure
    from tasks.app import app as celery_app
    from tasks.embedded import embedded_worker

    session_spec = options.job.session_spec()
    _validate(session_spec, settings)
    configure(settings)
    fleet = build_fleet(settings, CeleryTaskQueue(celery_app), migrate=True)
    started = datetime.now(UTC)
    if options.resume is not None:
        if fleet.ledger.get_batch(options.resume) is None:
            raise NotFoundError(f"no batch {options.resume} to resume")
        batch_id = options.resume
    else:
        batch_id = fleet.dispatcher.create_batch(
            options.job.name, options.job.model_dump(mode="json")
        ).batch_id
    err.print(f"batch {batch_id}: {len(options.repos)} repositories")
    try:
        if options.local:
            # Tools run in this process: its secrets leave its environment first.
            scrub_process_environment()
            with embedded_worker(celery_app, concurrency=options.workers):
                _dispatch_and_wait(fleet, session_spec, options, batch_id, err)
        else:
            _dispatch_and_wait(fleet, session_spec, options, batch_id, err)
    except KeyboardInterrupt:
        done = len(fleet.ledger.sessions(batch_id=batch_id, statuses=[SessionStatus.DONE]))
        err.print(
            f"[yellow]interrupted[/]: {done}/{len(options.repos)} sessions done; nothing is "
            f"lost -- resume with the same arguments and --resume {batch_id}"
        )
        return 130
    data = batch_report(fleet.ledger, batch_id, started_at=started)
    path = options.report or Path("reports") / f"batch-{batch_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", "utf-8")
    from nahida_workers.cli import render

    console.print(render.batch_table(data))
    console.print(f"batch {batch_id}: {data['summary']}  report: {path}")
    return 0 if data["all_completed"] else 1


def _dispatch_and_wait(
    fleet: Fleet, spec: SessionSpec, options: BatchOptions, batch_id: str, err: Console
) -> None:
    _dispatch_all(fleet, spec, options.repos, batch_id)
    _wait(fleet, batch_id, len(options.repos), options.timeout_s, err)


def _dispatch_all(fleet: Fleet, spec: SessionSpec, repos: list[Path], batch_id: str) -> None:
    provider = str(spec.provider.get("name") or spec.provider.get("kind", "scripted"))
    model = str(spec.provider.get("model") or provider)
    for path in repos:
        session, created = fleet.dispatcher.submit(
            spec,
            workspace=str(path),
            batch_id=batch_id,
            idempotency_key=f"{batch_id}:{path}",
            provider_name=provider,
            model=model,
        )
        if not created and session.status is not SessionStatus.DONE:
            fleet.dispatcher.redispatch(session.session_id)  # resumed: publish it again


def _wait(fleet: Fleet, batch_id: str, total: int, timeout_s: float, err: Console) -> None:
    deadline = time.monotonic() + timeout_s
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        task = progress.add_task("sessions", total=total)
        while True:
            done = len(fleet.ledger.sessions(batch_id=batch_id, statuses=[SessionStatus.DONE]))
            progress.update(task, completed=done)
            if done >= total:
                return
            if time.monotonic() > deadline:
                err.print(f"[yellow]timed out after {timeout_s:.0f}s with {done}/{total} done")
                return
            time.sleep(POLL_S)
