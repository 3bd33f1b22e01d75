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
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from nahida_workers.cli import render, session_cmds
from nahida_workers.cli.report import batch_report
from nahida_workers.cli.schedule_cmds import schedule_app
from nahida_workers.errors import ConfigError, NahidaError, NotFoundError, UserError
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.settings import Settings, load_settings

if TYPE_CHECKING:
    from nahida_workers.runtime.spec import JobSpec

# The heavier modules (Celery wiring, providers, Alembic) are imported by the
# commands that use them, so `nahida status` and `--help` start quickly.

__all__ = ["app"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Run LLM agent sessions durably: one session per repository, on a Celery fleet or "
    "embedded (--local).",
)
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
        from nahida_workers.runtime.wiring import EMBEDDED_URLS

        db.parent.mkdir(parents=True, exist_ok=True)
        overrides = {**EMBEDDED_URLS, "database_url": f"sqlite:///{db.resolve()}", **overrides}
    return load_settings(**overrides)


def _ledger(settings: Settings, *, migrate: bool = True) -> SqlLedger:
    engine = make_engine(settings.database_url)
    if migrate:
        from nahida_workers.ledger.migrate import upgrade

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
    workers: Annotated[int, typer.Option(min=1, help="Embedded session-worker threads.")] = 4,
    report: Annotated[Path | None, typer.Option(help="JSON report path.")] = None,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="Seconds to wait for the batch.")
    ] = 3600.0,
    resume: Annotated[
        str | None, typer.Option(help="Resume an interrupted batch (same job and repos).")
    ] = None,
    provider: Annotated[
        str | None,
        typer.Option(help="Override the job's provider: openai, anthropic or scripted."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="Provider base URL (with --provider).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name (with --provider).")] = None,
) -> None:
    """Run JOB once per repository; exit 0 only if every session completed."""
    from nahida_workers.cli.batch import BatchOptions, run_batch
    from nahida_workers.runtime.spec import load_job

    spec = load_job(job)
    if provider is not None:
        spec = _with_provider(spec, provider, base_url, model)
    options = BatchOptions(
        job=spec,
        repos=_repos(repo, repos_from),
        local=local,
        workers=workers,
        timeout_s=timeout,
        report=report,
        resume=resume,
    )
    raise typer.Exit(run_batch(options, _settings(local, db), console, err))


def _with_provider(spec: JobSpec, kind: str, base_url: str | None, model: str | None) -> JobSpec:
    """The job with its provider replaced (the script stays for ``scripted``)."""
    from nahida_workers.runtime.spec import JobSpec

    current = dict(spec.provider)
    if kind == "scripted":
        provider: dict[str, Any] = {**current, "kind": "scripted"}
    else:
        provider = {"kind": kind, "model": model or current.get("model") or "scripted"}
        if base_url:
            provider["base_url"] = base_url
    try:
        return JobSpec.model_validate({**spec.model_dump(), "provider": provider})
    except ValueError as exc:
        raise ConfigError(f"invalid --provider override: {exc}") from None


@app.command("mock-llm")
def mock_llm(
    script: Annotated[Path, typer.Option(help="A provider script, or a job file with one.")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free port).")] = 8089,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
) -> None:
    """Serve the OpenAI-compatible streaming API from a script, until Ctrl-C."""
    import yaml

    from nahida_workers.providers.mock_server import serve_mock_llm

    try:
        data = yaml.safe_load(script.read_text("utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {script}: {exc}") from None
    if isinstance(data, dict) and "turns" not in data:
        data = (data.get("provider") or {}).get("script")
    if data is None:
        raise ConfigError(f"{script} holds no provider script (turns)")
    server = serve_mock_llm(data, host=host, port=port)
    err.print(f"mock LLM serving {script} at {server.url} (OpenAI-compatible, streaming)")
    server.run_forever()


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


@runs_app.command("list")
def runs_list(
    session_id: Annotated[str, typer.Argument(help="The session id (`nahida status BATCH_ID`).")],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """List every run of a session, oldest first (a steering message can start another)."""
    ledger = _ledger(_settings(local, db), migrate=False)
    if ledger.get_session(session_id) is None:
        raise NotFoundError(f"no session {session_id}")
    console.print(render.runs_table(session_id, ledger.runs_of(session_id)))


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


app.add_typer(schedule_app, name="schedule")
app.command("watch")(session_cmds.watch)
app.command("steer")(session_cmds.steer)
app.command("cancel")(session_cmds.cancel)


@app.command()
def migrate(local: LocalOpt = False, db: DbOpt = DEFAULT_DB) -> None:
    """Create or upgrade the ledger schema (Alembic, add-only migrations)."""
    settings = _settings(local, db)
    _ledger(settings, migrate=True)
    console.print(f"ledger migrated: {make_engine(settings.database_url).url.render_as_string()}")


def main() -> None:
    """Entry point: typed errors become one clear line and an exit code.

    Exit codes: 0 success; 1 a batch with a session that did not complete;
    2 a usage or input error (job file, setting, unknown id); 3 an
    infrastructure error (database, broker or Redis unreachable); 130 Ctrl-C.
    """
    import click
    from pydantic import ValidationError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(standalone_mode=False)
    except UserError as exc:
        err.print(f"[red]error:[/red] {exc}")
        sys.exit(2)
    except ValidationError as exc:
        err.print(f"[red]error:[/red] invalid setting: {_first_error(exc)}")
        sys.exit(2)
    except NahidaError as exc:
        err.print(f"[red]error:[/red] {exc}")
        sys.exit(3)
    except (KeyboardInterrupt, click.exceptions.Abort):
        err.print("interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if _is_connection_error(exc):
            err.print(f"[red]error:[/red] service unreachable: {type(exc).__name__}: {exc}")
            sys.exit(3)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _first_error(exc: Any) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(settings)"
    return f"NAHIDA_{where.upper()}: {first.get('msg')}"


def _is_connection_error(exc: BaseException) -> bool:
    import kombu.exceptions
    import redis

    return isinstance(exc, kombu.exceptions.OperationalError | redis.ConnectionError | OSError)


from nahida_workers.cli.eval_cmd import eval_command  # noqa: E402

app.command("eval")(eval_command)
