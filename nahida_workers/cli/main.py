"""The ``nahida`` command (typer + rich).

``nahida batch JOB.yaml --repo PATH ...`` runs one session per repository,
``nahida status [BATCH_ID]`` shows batches, ``nahida runs show RUN_ID`` prints
a run's ledger, ``nahida migrate`` migrates the database, ``nahida serve``
serves the HTTP API and the web view.  ``--local`` runs the embedded mode:
in-memory broker, Celery worker threads in this process, fakeredis for the
lease, a SQLite ledger file -- the same runtime code path.

Every failure is one line on stderr and an exit code of
:class:`~nahida_workers.cli.exits.ExitCode`; ``--debug`` (anywhere on the
command line) shows the traceback instead.  Module-level imports are only
typer and the standard library: each command imports what it uses, so
``nahida --help`` starts fast (``bench/cli_startup.py``).
"""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nahida_workers.cli import ask_cmd, session_cmds, shell_cmd
from nahida_workers.cli.common import (
    DEFAULT_DB,
    DbOpt,
    JsonOpt,
    LocalOpt,
    MaxRunningOpt,
    PriorityOpt,
    err,
    ledger_for,
    out,
    print_json,
    settings_for,
)
from nahida_workers.cli.exits import ExitCode, classify, print_error, state
from nahida_workers.cli.memory_cmds import memory_app
from nahida_workers.cli.schedule_cmds import schedule_app
from nahida_workers.cli.team_cmds import team_app
from nahida_workers.cli.worktree_cmds import worktrees_app

if TYPE_CHECKING:
    from nahida_workers.runtime.spec import JobSpec

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run LLM agent sessions durably: one session per repository, on a Celery fleet or "
    "embedded (--local).  Exit codes: 0 ok, 1 a session did not complete, 2 usage or input "
    "error, 3 database/broker/Redis unreachable, 4 recorded but not yet delivered (broker "
    "down), 5 batch --timeout, 130 interrupted.  Anywhere on the command line: --debug shows "
    "tracebacks, --create-db lets --db name a file in a folder that does not exist yet.",
)
runs_app = typer.Typer(no_args_is_help=True, help="Inspect runs.")
app.add_typer(runs_app, name="runs")


def _repos(repo: list[Path], repos_from: Path | None) -> list[Path]:
    from nahida_workers.errors import UserError

    paths = list(repo)
    if repos_from is not None:
        try:
            lines = repos_from.read_bytes().decode("utf-8").splitlines()
        except OSError as exc:
            raise UserError(f"cannot read {repos_from}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UserError(f"{repos_from} is not UTF-8 text") from None
        paths += [Path(line.strip()) for line in lines if line.strip() and not line.startswith("#")]
    if not paths:
        raise UserError("no repositories: pass --repo PATH (repeatable) or --repos-from FILE")
    resolved = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"not a directory: {path}")
        resolved.append(path.resolve())
    return list(dict.fromkeys(resolved))


def with_dispatch(spec: "JobSpec", *, priority: int | None, max_running: int | None) -> "JobSpec":
    """The job with ``--priority`` / ``--max-running`` applied (None keeps the job's)."""
    update: dict[str, int] = {}
    if priority is not None:
        update["priority"] = priority
    if max_running is not None:
        update["max_running"] = max_running
    return spec.model_copy(update=update) if update else spec


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
        float,
        typer.Option(min=0.001, help="Seconds to wait for the batch; then exit 5 (resumable)."),
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
    priority: PriorityOpt = None,
    max_running: MaxRunningOpt = None,
) -> None:
    """Run JOB once per repository; exit 0 only if every session completed."""
    from nahida_workers.cli.batch import BatchOptions, run_batch
    from nahida_workers.runtime.spec import load_job

    spec = load_job(job)
    if provider is not None:
        spec = _with_provider(spec, provider, base_url, model)
    spec = with_dispatch(spec, priority=priority, max_running=max_running)
    options = BatchOptions(
        job=spec,
        repos=_repos(repo, repos_from),
        local=local,
        workers=workers,
        timeout_s=timeout,
        report=report,
        resume=resume,
    )
    raise typer.Exit(run_batch(options, settings_for(local, db), out(), err()))


def _with_provider(
    spec: "JobSpec", kind: str, base_url: str | None, model: str | None
) -> "JobSpec":
    """The job with its provider replaced (the script stays for ``scripted``)."""
    from nahida_workers.errors import ConfigError
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
    from nahida_workers.errors import ConfigError
    from nahida_workers.testing.mock_server import serve_mock_llm
    from nahida_workers.yaml_input import read_yaml_file

    data = read_yaml_file(script, what="script")
    if isinstance(data, dict) and "turns" not in data:
        data = (data.get("provider") or {}).get("script")
    if isinstance(data, list):  # a bare list of turns, as load_script reads it
        data = {"turns": data}
    if not isinstance(data, dict | str):
        raise ConfigError(f"{script} holds no provider script (turns)")
    server = serve_mock_llm(data, host=host, port=port)
    print(
        f"mock LLM serving {script} at {server.url} (OpenAI-compatible, streaming)", file=sys.stderr
    )
    server.run_forever()


def _utcnow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def _no_schema_yet(exc: BaseException) -> bool:
    text = str(getattr(exc, "orig", None) or exc)
    return "no such table" in text


def _memory_counters(ledger: Any) -> dict[str, int]:
    """The workspace-memory counters of every workspace (docs/memory.md)."""
    from nahida_workers.ledger.recall import recall_ledger

    return recall_ledger(ledger).counts()


@app.command()
def status(
    batch_id: Annotated[
        str | None, typer.Argument(help="A batch id or unique prefix; omit to list batches.")
    ] = None,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    since: Annotated[
        str,
        typer.Option(
            help="Without BATCH_ID: total the tokens (and cost) per job of the runs started "
            "in this period (30m, 24h, 7d) or since this ISO date/time.",
        ),
    ] = "24h",
) -> None:
    """List batches with their sessions' progress, or show the sessions of one batch.

    Without BATCH_ID: every batch (sessions, done, by state), the sessions of
    the newest one, and what the fleet spent per job over ``--since``
    (tokens; a cost with a price table, NAHIDA_PRICES_FILE).
    """
    from nahida_workers.cli import render
    from nahida_workers.cli.ids import resolve
    from nahida_workers.cli.report import batch_report
    from nahida_workers.errors import LedgerUnavailableError
    from nahida_workers.spend import jobs_usage, parse_since, prices_of

    settings = settings_for(local, db)
    ledger = ledger_for(settings)
    prices = prices_of(settings)
    if batch_id is None:
        start = parse_since(since, now=_utcnow())
        try:
            rows = render.batches_rows(ledger)
        except LedgerUnavailableError as exc:
            if not (local and _no_schema_yet(exc)):
                raise
            rows = []  # a --local ledger file nothing has written to yet
        try:
            memory = _memory_counters(ledger)
        except LedgerUnavailableError as exc:
            if not (local and _no_schema_yet(exc)):
                raise
            memory = {}
        spent = jobs_usage(ledger, since=start, table=prices) if rows else None
        if as_json:
            print_json({"batches": rows, "memory": memory, "usage": spent})
            return
        if not rows:
            out().print(f"no batches yet{f' in {db}' if local else ''}")
            return
        out().print(render.batches_table(rows))
        newest = batch_report(ledger, rows[0]["batch_id"], prices=prices)
        out().print(render.batch_table(newest, width=out().width))
        if any(memory.values()):
            out().print("memory: " + ", ".join(f"{k} {v}" for k, v in memory.items()))
        if spent is not None:
            out().print(render.jobs_usage_table(spent, since_text=since))
        return
    full = resolve(ledger, "batch", batch_id)
    data = batch_report(ledger, full, prices=prices)
    if as_json:
        print_json(data)
        return
    out().print(render.batch_table(data, width=out().width))
    out().print(render.summary_sentence(data))


@runs_app.command("list")
def runs_list(
    session_id: Annotated[
        str, typer.Argument(help="The session id or a unique prefix (`nahida status BATCH_ID`).")
    ],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """List every run of a session, oldest first (a steering message can start another)."""
    from nahida_workers.cli import render
    from nahida_workers.cli.ids import resolve

    ledger = ledger_for(settings_for(local, db))
    full = resolve(ledger, "session", session_id)
    runs = ledger.runs_of(full)
    if as_json:
        print_json({"session_id": full, "runs": [r.model_dump(mode="json") for r in runs]})
        return
    out().print(render.runs_table(full, runs))


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id or a unique prefix.")],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Print every event of a run in order, tool calls with their receipts, then its usage.

    The last line totals the tokens the provider reported over the run's
    turns (input, cached, output) and, with a price table
    (NAHIDA_PRICES_FILE), the cost (``--json``: ``usage``).

    A Task call is followed by its child session and the child's state
    (``--json``: ``children``, call id -> the child's full id, status, state).
    """
    from nahida_workers.cli import render
    from nahida_workers.cli.ids import resolve
    from nahida_workers.cli.tree import call_children
    from nahida_workers.spend import prices_of, run_usage, usage_line

    settings = settings_for(local, db)
    ledger = ledger_for(settings)
    full = resolve(ledger, "run", run_id)
    run = ledger.get_run(full)
    assert run is not None  # resolve found it
    events, receipts = ledger.events(full), ledger.receipts(full)
    children = call_children(ledger, run, receipts)
    usage = run_usage(ledger, run, prices_of(settings))
    if as_json:
        print_json(
            {
                "run": run.model_dump(mode="json"),
                "usage": usage,
                "events": [e.model_dump(mode="json") for e in events],
                "receipts": [r.model_dump(mode="json") for r in receipts],
                "children": children,
            }
        )
        return
    render.print_run(out(), run, events, receipts, children)
    out().print(usage_line(usage), markup=False)


@app.command()
def tree(
    session_id: Annotated[str, typer.Argument(help="The session id or a unique prefix.")],
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Print a session and its child sessions, recursively, with states, runs and durations.

    ``--json``: one nested document with full ids (DESIGN.md section 8).
    """
    from nahida_workers.cli.ids import resolve
    from nahida_workers.cli.tree import session_tree, tree_render

    ledger = ledger_for(settings_for(local, db))
    full = resolve(ledger, "session", session_id)
    doc = session_tree(ledger, full)
    if as_json:
        print_json(doc)
        return
    out().print(tree_render(doc))


app.add_typer(schedule_app, name="schedule")
app.add_typer(team_app, name="team")
app.add_typer(worktrees_app, name="worktrees")
app.add_typer(memory_app, name="memory")
app.command("watch")(session_cmds.watch)
app.command("steer")(session_cmds.steer)
app.command("cancel")(session_cmds.cancel)
app.command("shell")(shell_cmd.shell)
app.command("ask")(ask_cmd.ask)


@app.command()
def migrate(
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
    no_backup: Annotated[
        bool, typer.Option("--no-backup", help="PostgreSQL: migrate without running pg_dump first.")
    ] = False,
    backup_dir: Annotated[
        Path,
        typer.Option(
            "--backup-dir", help="PostgreSQL: where the pg_dump file goes (created, mode 0700)."
        ),
    ] = Path("var/backups"),
    pg_dump_path: Annotated[
        str, typer.Option("--pg-dump", help="The pg_dump program (a name on PATH or a path).")
    ] = "pg_dump",
) -> None:
    """Create or upgrade the ledger schema (Alembic, add-only migrations).

    On PostgreSQL, when a migration is pending, ``pg_dump`` (custom format,
    restore with ``pg_restore``) first writes ``BACKUP_DIR/nahida-DB-TIME.dump``;
    a missing or failing pg_dump stops before anything changes.  Each
    migration commits with its revision stamp, so a migrate interrupted
    mid-way is simply run again.  SQLite (``--local``) is not dumped.
    """
    from nahida_workers.cli.migrate_cmd import run_migrate

    run_migrate(
        settings_for(local, db),
        backup=not no_backup,
        backup_dir=backup_dir,
        pg_dump_path=pg_dump_path,
    )


@app.command("eval")
def eval_command(
    set_path: Annotated[
        Path | None,
        typer.Option(
            "--set",
            help="Evaluation set file (YAML); default: the repository's tests/eval/sessions.yaml.",
        ),
    ] = None,
) -> None:
    """Run the evaluation set in-process and compare terminal states with expectations."""
    from nahida_workers.cli.eval_cmd import eval_command as run_eval

    run_eval(set_path)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Interface; without NAHIDA_API_TOKEN only 127.0.0.1 is allowed.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port.")] = 8080,
    ssl_certfile: Annotated[
        str | None, typer.Option(help="Serve HTTPS with this PEM certificate (chain).")
    ] = None,
    ssl_keyfile: Annotated[
        str | None, typer.Option(help="The certificate's private key (PEM), if not in it.")
    ] = None,
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /openapi.json) and the web view (/) until Ctrl-C."""
    from nahida_workers.api.server import run_server
    from nahida_workers.worker_secrets import scrub_process_environment

    settings = settings_for()
    # The token, the database URL and provider keys leave the environment
    # (and /proc/PID/environ) before anything else runs, as in a worker.
    scrub_process_environment()
    run_server(
        settings,
        host=host,
        port=port,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )


def _argv_errors(argv: list[str]) -> str | None:
    for index, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "backslashreplace").decode("ascii", "replace")
            return f"error: argument {index} is not valid UTF-8: {shown[:120]}"
    return None


def main() -> None:
    """Entry point: every failure becomes one clear line and a documented exit code.

    Exit codes (:class:`~nahida_workers.cli.exits.ExitCode`): 0 success; 1 a
    batch with a session that did not complete (or ``watch`` timed out); 2 a
    usage or input error; 3 the database, broker or Redis is unreachable; 4 the
    ledger recorded the request and the broker is down (it will be delivered);
    5 ``batch --timeout`` passed; 130 Ctrl-C.  ``--debug`` anywhere on the
    command line re-raises instead (a traceback).
    """
    import logging
    import os

    # Pydantic scans every installed distribution's entry points for plugins
    # when it builds its first model (~10 ms of a start-up budget of 500,
    # ``bench/cli_startup``); the CLI uses none.  An explicit setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    argv = sys.argv[1:]
    debug = "--debug" in argv
    # ``--create-db``, like ``--debug``, is taken anywhere on the command line.
    state.create_db = "--create-db" in argv
    argv = [a for a in argv if a not in ("--debug", "--create-db")]
    bad = _argv_errors(argv)
    if bad is not None:
        print_error(bad)
        sys.exit(ExitCode.USAGE)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(args=argv, prog_name="nahida", standalone_mode=False)
    except KeyboardInterrupt:
        print_error("interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")  # type: ignore[attr-defined]
            sys.exit(ExitCode.USAGE)
        if type(exc).__name__ == "Abort":
            print_error("interrupted")
            sys.exit(ExitCode.INTERRUPTED)
        if debug:
            raise
        exit_code, line = classify(exc)
        print_error(line)
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)
