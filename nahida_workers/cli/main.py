"""The ``nahida`` command (typer + rich).

``nahida batch JOB.yaml --repo PATH ...`` runs one session per repository,
``nahida status [BATCH_ID]`` shows batches, ``nahida runs show RUN_ID`` prints
a run's ledger, ``nahida migrate`` migrates the database.  ``--local`` runs the
embedded mode: in-memory broker, Celery worker threads in this process,
fakeredis for the lease, a SQLite ledger file -- the same runtime code path.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nahida_workers.cli import render
from nahida_workers.cli.report import batch_report
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import NahidaError, NotFoundError, UserError
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.spec import load_job
from nahida_workers.runtime.wiring import EMBEDDED_URLS
from nahida_workers.settings import Settings, load_settings

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
runs_app = typer.Typer(no_args_is_help=True, help="Inspect runs.")
app.add_typer(runs_app, name="runs")
# Pipes and CI logs get wide lines instead of 80-column cells cut with an ellipsis.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

DEFAULT_DB = Path("var/nahida.sqlite3")
LocalOpt = Annotated[
    bool, typer.Option("--local", help="Embedded mode: SQLite ledger file, in-process workers.")
]
DbOpt = Annotated[Path, typer.Option("--db", help="SQLite ledger file for --local.")]


def _settings(local: bool, db: Path, **overrides: Any) -> Settings:
    if local:
        db.parent.mkdir(parents=True, exist_ok=True)
        overrides = {**EMBEDDED_URLS, "database_url": f"sqlite:///{db.resolve()}", **overrides}
    return load_settings(**overrides)


def _ledger(settings: Settings, *, migrate: bool = True) -> SqlLedger:
    engine = make_engine(settings.database_url)
    if migrate:
        upgrade(engine)
    return SqlLedger(engine=engine, payload_max_bytes=settings.event_payload_max_bytes)


def _repos(repo: list[Path], repos_from: Path | None) -> list[Path]:
    paths = list(repo)
    if repos_from is not None:
        try:
            lines = repos_from.read_text("utf-8").splitlines()
        except OSError as exc:
            raise UserError(f"cannot read {repos_from}: {exc}") from None
        paths += [Path(line.strip()) for line in lines if line.strip() and not line.startswith("#")]
    if not paths:
        raise UserError("no repositories: pass --repo PATH (repeatable) or --repos-from FILE")
    resolved = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"not a directory: {path}")
        resolved.append(path.resolve())
    return list(dict.fromkeys(resolved))


@app.command()
def batch(
    job: Annotated[Path, typer.Argument(help="Job file (YAML).")],
    repo: Annotated[list[Path], typer.Option("--repo", help="A repository (repeatable).")] = [],  # noqa: B006
    repos_from: Annotated[
        Path | None, typer.Option("--repos-from", help="File with one path per line.")
    ] = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    workers: Annotated[int, typer.Option(help="Embedded session-worker threads.")] = 4,
    report: Annotated[Path | None, typer.Option(help="JSON report path.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the batch.")] = 3600.0,
) -> None:
    """Run JOB once per repository; exit non-zero unless every session completed."""
    spec = load_job(job)
    repos = _repos(repo, repos_from)
    settings = _settings(local, db)
    from nahida_workers.runtime.wiring import build_fleet
    from tasks.app import CeleryTaskQueue, configure
    from tasks.app import app as celery_app
    from tasks.embedded import embedded_worker

    configure(settings)
    fleet = build_fleet(settings, CeleryTaskQueue(celery_app), migrate=True)
    started = datetime.now(UTC)
    session_spec = spec.session_spec()
    record = fleet.dispatcher.create_batch(spec.name, spec.model_dump(mode="json"))
    if local:
        with embedded_worker(celery_app, concurrency=workers):
            _dispatch_all(fleet, session_spec, repos, record.batch_id)
            _wait(fleet.ledger, record.batch_id, len(repos), timeout)
    else:
        _dispatch_all(fleet, session_spec, repos, record.batch_id)
        _wait(fleet.ledger, record.batch_id, len(repos), timeout)
    data = batch_report(fleet.ledger, record.batch_id, started_at=started)
    path = report or Path("reports") / f"batch-{record.batch_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", "utf-8")
    console.print(render.batch_table(data))
    console.print(f"batch {record.batch_id}: {data['summary']}  report: {path}")
    raise typer.Exit(0 if data["all_completed"] else 1)


def _dispatch_all(fleet: Any, spec: Any, repos: list[Path], batch_id: str) -> None:
    provider = spec.provider.get("name") or spec.provider.get("kind", "scripted")
    model = spec.provider.get("model") or provider
    for path in repos:
        fleet.dispatcher.submit(
            spec,
            workspace=str(path),
            batch_id=batch_id,
            idempotency_key=f"{batch_id}:{path}",
            provider_name=provider,
            model=model,
        )


def _wait(ledger: SqlLedger, batch_id: str, total: int, timeout: float) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    deadline = time.monotonic() + timeout
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task("sessions", total=total)
        while True:
            done = len(ledger.sessions(batch_id=batch_id, statuses=[SessionStatus.DONE]))
            progress.update(task, completed=done)
            if done >= total:
                return
            if time.monotonic() > deadline:
                err.print(f"[yellow]timed out after {timeout:.0f}s with {done}/{total} done")
                return
            time.sleep(0.2)


@app.command()
def status(
    batch_id: Annotated[
        str | None, typer.Argument(help="A batch id; omit to list batches.")
    ] = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """List batches, or show the sessions of one batch."""
    ledger = _ledger(_settings(local, db), migrate=False)
    if batch_id is None:
        console.print(render.batches_table(ledger))
        return
    if ledger.get_batch(batch_id) is None:
        raise NotFoundError(f"no batch {batch_id}")
    console.print(render.batch_table(batch_report(ledger, batch_id)))


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print every event of a run in order, tool calls with their receipts."""
    ledger = _ledger(_settings(local, db), migrate=False)
    run = ledger.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id}")
    events, receipts = ledger.events(run_id), ledger.receipts(run_id)
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "run": run.model_dump(mode="json"),
                    "events": [e.model_dump(mode="json") for e in events],
                    "receipts": [r.model_dump(mode="json") for r in receipts],
                }
            )
        )
        return
    render.print_run(console, run, events, receipts)


@app.command()
def migrate(local: LocalOpt = False, db: DbOpt = DEFAULT_DB) -> None:
    """Create or upgrade the ledger schema (Alembic, add-only migrations)."""
    settings = _settings(local, db)
    _ledger(settings, migrate=True)
    console.print(f"ledger migrated: {make_engine(settings.database_url).url.render_as_string()}")


def main() -> None:
    """Entry point with typed errors turned into one clear line and exit code 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(standalone_mode=False)
    except NahidaError as exc:
        err.print(f"[red]error:[/red] {exc}")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)
