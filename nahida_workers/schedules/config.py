"""Schedule definitions from the command line or ``config/schedules.yaml`` (DESIGN.md section 8).

Both go through :func:`build_definition`: the job is loaded and validated
(its provider built, its tools resolved -- a typo is a usage error now, not
a failed fire at 3 a.m.), the repositories must be directories, and the
result is a :class:`ScheduleDef` with the job snapshot inside.

Relative paths (job files, repositories, ``repos_from`` files and their
lines) resolve against the current directory, as ``nahida batch`` does.

The file format::

    schedules:
      - name: nightly-corpus-survey
        job: config/jobs/repo-survey.yaml     # a job file, or an inline mapping
        repos_from: corpus/repos.txt          # or repos: [path, ...]
        cron: "0 3 * * *"                     # or every: 10m
        timezone: Europe/Berlin
        overlap: skip                         # buffer_one | allow | cancel_previous
        catchup_window: 1h
        jitter: 5m
        priority: 7                           # 0-9, 9 most urgent (default: the job's)
        max_running: 4                        # across all its fires (default: the job's)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.errors import ConfigError, UserError
from nahida_workers.runtime.spec import JobSpec, load_job
from nahida_workers.schedules.model import Overlap, ScheduleDef, parse_duration
from nahida_workers.schedules.timing import shortest_period
from nahida_workers.settings import Settings
from nahida_workers.yaml_input import read_yaml_file

__all__ = ["ScheduleEntry", "build_definition", "load_schedules_file", "resolve_repos"]


def resolve_repos(repos: Sequence[str | Path], repos_from: str | Path | None) -> tuple[str, ...]:
    """Absolute, de-duplicated repository paths, in order.

    Raises:
        UserError: none given, a list file unreadable, or a path not a directory.
    """
    paths = [Path(p) for p in repos]
    if repos_from is not None:
        try:
            lines = Path(repos_from).read_text("utf-8").splitlines()
        except OSError as exc:
            raise UserError(f"cannot read {repos_from}: {exc}") from None
        paths += [Path(s.strip()) for s in lines if s.strip() and not s.lstrip().startswith("#")]
    if not paths:
        raise UserError("no repositories: pass --repo PATH (repeatable) or --repos-from FILE")
    resolved = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"not a directory: {path}")
        resolved.append(str(path.resolve()))
    return tuple(dict.fromkeys(resolved))


def _job(job: str | Path | dict[str, Any]) -> tuple[JobSpec, str | None]:
    if isinstance(job, dict):
        try:
            return JobSpec.model_validate(job), None
        except ValidationError as exc:
            raise ConfigError(f"invalid inline job: {exc.errors()[0]['msg']}") from None
    return load_job(job), str(Path(job).resolve())


def _with_dispatch(
    job: JobSpec, name: str, *, priority: int | None, max_running: int | None
) -> JobSpec:
    """``job`` with the schedule's priority and cap, validated.

    Raises:
        ConfigError: a priority outside 0-9 or a negative cap.
    """
    update = {
        k: v for k, v in (("priority", priority), ("max_running", max_running)) if v is not None
    }
    if not update:
        return job
    try:
        return JobSpec.model_validate({**job.model_dump(mode="json"), **update})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"schedule {name}: {where}: {first['msg']}") from None


def _with_agents(job: JobSpec, settings: Settings, repos: Sequence[str]) -> JobSpec:
    """The job with the config folder's agents merged in, checked as ``nahida batch`` checks.

    The config folder is read now (the schedule snapshots the result, like
    its job); a repository's ``.nahida/agents/`` (``trust_workspace``) is
    checked now for each repository and read again at each fire.

    Raises:
        ConfigError: as :func:`~nahida_workers.runtime.dispatch.preflight.check_spec`;
            a broken agent definition (naming its file).
    """
    from nahida_workers.runtime.agents.discover import with_agents
    from nahida_workers.runtime.dispatch.preflight import check_spec

    merged = with_agents(job, settings=settings)
    if not merged.trust_workspace:
        check_spec(merged.session_spec(), settings)
        return merged
    for repo in repos:  # each repository may define the agents the script starts
        spec = with_agents(merged, settings=settings, workspace=Path(repo), config=False)
        check_spec(spec.session_spec(), settings)
    return merged


def build_definition(
    *,
    name: str,
    job: str | Path | dict[str, Any],
    repos: Sequence[str | Path] = (),
    repos_from: str | Path | None = None,
    cron: str | None = None,
    every: str | float | None = None,
    timezone: str = "UTC",
    overlap: Overlap | str = Overlap.SKIP,
    catchup_window: str | float = 300,
    jitter: str | float = 0,
    priority: int | None = None,
    max_running: int | None = None,
    settings: Settings,
) -> ScheduleDef:
    """A validated definition (job snapshot, absolute repositories, durations in seconds).

    ``priority`` / ``max_running`` (None: the job's own) are set in the job
    snapshot: the fires' sessions are queued at that priority, and at most
    that many run at once across all the schedule's fires.

    Raises:
        ConfigError: the job, a duration, the cron expression, the time zone
            or a policy is invalid (the message names it).
        UserError: a repository is missing.
    """
    spec, job_path = _job(job)
    spec = _with_dispatch(spec, name, priority=priority, max_running=max_running)
    resolved = resolve_repos(repos, repos_from)
    spec = _with_agents(spec, settings, resolved)
    try:
        window_s = parse_duration(catchup_window)
    except ValueError as exc:
        raise ConfigError(f"schedule {name}: {exc}") from None
    if window_s <= settings.schedule_tick_s:
        # A fire is decided by the first tick after it: up to one tick late.
        raise ConfigError(
            f"schedule {name}: the catch-up window ({window_s:g}s) must exceed the tick "
            f"interval NAHIDA_SCHEDULE_TICK_S ({settings.schedule_tick_s:g}s), or on-time "
            "fires are recorded missed"
        )
    try:
        definition = ScheduleDef(
            name=name,
            job=spec.model_dump(mode="json"),
            job_path=job_path,
            repos=resolved,
            cron=cron,
            every_s=None if every is None else parse_duration(every),
            timezone=timezone,
            overlap=Overlap(overlap),
            catchup_window_s=window_s,
            jitter_s=parse_duration(jitter),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "schedule"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"schedule {name}: {where}: {message}") from None
    except ValueError as exc:  # a duration or an unknown overlap policy
        raise ConfigError(f"schedule {name}: {exc}") from None
    _check_period(definition, settings)
    _check_jitter(definition)
    return definition


def _check_period(definition: ScheduleDef, settings: Settings) -> None:
    """Refuse a schedule whose fires come more often than beat ticks.

    Beat decides fires once per tick (``NAHIDA_SCHEDULE_TICK_S``): a shorter
    period gets several fire times per tick, and all but the first overlap
    it (with ``skip``, most fires were recorded skipped).

    Raises:
        ConfigError: the shortest gap between two fires is below the tick interval.
    """
    period_s = shortest_period(definition).total_seconds()
    tick_s = settings.schedule_tick_s
    if period_s < tick_s:
        raise ConfigError(
            f"schedule {definition.name}: the period ({period_s:g}s) is shorter than the "
            f"tick interval NAHIDA_SCHEDULE_TICK_S ({tick_s:g}s); fire at most once per "
            f"tick (--every {tick_s:g}s or more)"
        )


def _check_jitter(definition: ScheduleDef) -> None:
    """Refuse a jitter not shorter than the schedule's shortest period.

    Such a jitter delays a fire past the next fire time, so fires queue up
    behind each other (and overlap policies see fires that are not yet due).

    Raises:
        ConfigError: ``jitter_s`` >= the shortest gap between two fires.
    """
    period_s = shortest_period(definition).total_seconds()
    if definition.jitter_s >= period_s:
        raise ConfigError(
            f"schedule {definition.name}: the jitter ({definition.jitter_s:g}s) must be "
            f"shorter than the schedule's period ({period_s:g}s)"
        )


class ScheduleEntry(BaseModel):
    """One entry of ``config/schedules.yaml`` (durations as text: ``30s``, ``1h``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    job: str | dict[str, Any]
    repos: list[str] = Field(default_factory=list)
    repos_from: str | None = None
    cron: str | None = None
    every: str | int | float | None = None
    timezone: str = "UTC"
    overlap: str = Overlap.SKIP.value
    catchup_window: str | int | float = "5m"
    jitter: str | int | float = "0s"
    priority: int | None = None
    max_running: int | None = None


def load_schedules_file(path: str | Path, settings: Settings) -> list[ScheduleDef]:
    """Every schedule of a YAML file, validated; none is stored if one is invalid.

    Raises:
        ConfigError: unreadable file, bad format, an invalid entry, a duplicate name.
        UserError: a repository is missing.
    """
    path = Path(path)
    # The alias and size limits of every YAML input: a bare safe_load expands
    # an alias bomb while the entries are validated (it hung `schedule apply`).
    data = read_yaml_file(path, what="schedules file")
    entries = data.get("schedules") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a mapping with a 'schedules' list")
    definitions: list[ScheduleDef] = []
    for i, raw in enumerate(entries):
        try:
            entry = ScheduleEntry.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ConfigError(f"{path}: schedules[{i}].{where}: {first['msg']}") from None
        definitions.append(build_definition(settings=settings, **entry.model_dump()))
    names = [d.name for d in definitions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{path}: schedule names must be unique: {', '.join(duplicates)}")
    return definitions
