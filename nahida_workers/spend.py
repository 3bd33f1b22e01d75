"""What the fleet spent, read from the ledger: tokens and cost per run, session, batch, job.

Every provider turn's usage is recorded in the ledger with the turn: its
``assistant_output`` event carries the ``usage`` the provider reported and
the ``model`` that answered (DESIGN.md section 3, the turn commit).  These
reads total them -- per run, per session (its runs), per batch (its
sessions, child sessions included: they share the batch id), per schedule
fire (its batch) and per job over a period -- and price them with the
operator's table (:func:`load_prices`, :mod:`nahida_workers.core.usage`).

On a SQL ledger the turns are read with one query per 500 runs that takes
only ``payload_json -> 'usage'`` and ``-> 'model'`` (never the turn's text);
any other ledger (the in-memory twin) is read through its ``events``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from nahida_workers.core.events import EventType
from nahida_workers.core.records import RunRecord
from nahida_workers.core.usage import PriceTable, UsageTally
from nahida_workers.errors import ConfigError

__all__ = [
    "NO_BATCH",
    "batch_usage",
    "jobs_usage",
    "load_prices",
    "parse_since",
    "prices_of",
    "run_usage",
    "runs_usage",
    "sessions_usage",
    "usage_line",
]

#: The job label of sessions no batch holds (posted one by one over the API).
NO_BATCH = "(no batch)"
_CHUNK = 500


def prices_of(settings: Any) -> PriceTable | None:
    """The price table ``settings.prices_file`` names (None: no such file).

    Raises:
        ConfigError: as :func:`load_prices`.
    """
    return load_prices(settings.prices_file)


def usage_line(usage: dict[str, Any]) -> str:
    """Totals as one line: ``tokens 4,000 in (400 cached), 300 out; cost $0.0167``.

    The cost part only when there is one; ``cost unknown`` when a price table
    is set but a turn's model is not in it.
    """
    line = f"tokens {usage['input_tokens']:,} in"
    if usage["cached_tokens"]:
        line += f" ({usage['cached_tokens']:,} cached)"
    if usage["cache_write_tokens"]:
        line += f", {usage['cache_write_tokens']:,} cache write"
    line += f", {usage['output_tokens']:,} out over {usage['turns']} turn(s)"
    if usage.get("cost_usd") is not None:
        line += f"; cost ${usage['cost_usd']:.4f}"
    elif usage.get("unpriced_turns"):
        line += f"; cost unknown ({usage['unpriced_turns']} turn(s) of a model with no price)"
    return line


def load_prices(path: str | Path | None) -> PriceTable | None:
    """The price table in ``path`` (``NAHIDA_PRICES_FILE``); None when there is no such file.

    Raises:
        ConfigError: the file is unreadable, not YAML, or not a price table
            (the message names the path and the field).
    """
    if not path:
        return None
    path = Path(path)
    if not path.is_file():
        return None
    from pydantic import ValidationError

    from nahida_workers.yaml_input import read_yaml_file

    data = read_yaml_file(path, what="price table")
    try:
        return PriceTable.model_validate(data or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"price table {path}: {where}: {first['msg']}") from None


def _turns(ledger: Any, ids: Sequence[str]) -> Iterator[tuple[str, Any, Any]]:
    """``(run_id, reported model, usage)`` of every provider turn of the runs ``ids``."""
    engine = getattr(ledger, "engine", None)
    if engine is None:
        for run_id in ids:
            for event in ledger.events(run_id):
                if event.type is EventType.ASSISTANT_OUTPUT:
                    yield run_id, event.payload.get("model"), event.payload.get("usage")
        return
    from sqlalchemy import select

    from nahida_workers.ledger import schema as t

    e = t.agent_run_events
    with engine.connect() as conn:
        for start in range(0, len(ids), _CHUNK):
            query = select(e.c.run_id, e.c.payload_json["model"], e.c.payload_json["usage"]).where(
                e.c.event_type == EventType.ASSISTANT_OUTPUT.value,
                e.c.run_id.in_(ids[start : start + _CHUNK]),
            )
            for row in conn.execute(query):
                yield row[0], row[1], row[2]


def runs_usage(
    ledger: Any, runs: Sequence[RunRecord], table: PriceTable | None
) -> dict[str, UsageTally]:
    """A tally per run id (every run of ``runs`` has one, zeros if it made no provider turn)."""
    return _by_run(ledger, {r.run_id: r.model for r in runs}, table)


def _by_run(ledger: Any, models: dict[str, str], table: PriceTable | None) -> dict[str, UsageTally]:
    """A tally per run id of ``models`` (run id -> the run's model)."""
    tallies = {run_id: UsageTally(table) for run_id in models}
    for run_id, model, usage in _turns(ledger, list(models)):
        reported = model if isinstance(model, str) else None
        tallies[run_id].add(
            usage if isinstance(usage, dict) else None,
            reported=reported,
            run_model=models[run_id],
        )
    return tallies


def run_usage(ledger: Any, run: RunRecord, table: PriceTable | None) -> dict[str, Any]:
    """One run's totals (:meth:`UsageTally.as_json`)."""
    return runs_usage(ledger, [run], table)[run.run_id].as_json()


def sessions_usage(
    ledger: Any, session_ids: Sequence[str], table: PriceTable | None
) -> dict[str, UsageTally]:
    """A tally per session id: the sum over its runs."""
    runs = {sid: ledger.runs_of(sid) for sid in session_ids}
    every = [r for rs in runs.values() for r in rs]
    per_run = runs_usage(ledger, every, table)
    return {sid: UsageTally(table).merge(per_run[r.run_id] for r in rs) for sid, rs in runs.items()}


def batch_usage(ledger: Any, batch_id: str, table: PriceTable | None) -> dict[str, Any]:
    """A batch's totals: every session of it (child sessions share the batch id)."""
    ids = [s.session_id for s in ledger.sessions(batch_id=batch_id)]
    tallies = sessions_usage(ledger, ids, table)
    return UsageTally(table).merge(tallies.values()).as_json()


def jobs_usage(ledger: Any, *, since: datetime | None, table: PriceTable | None) -> dict[str, Any]:
    """Totals per job of the runs started at or after ``since`` (None: all), and the sum.

    A session's job is its batch's (a schedule's fires are batches of its
    job); sessions no batch holds are :data:`NO_BATCH`.

    Returns:
        ``{"since", "priced", "jobs": [{"job", "sessions", "runs", **totals}],
        "total": totals}``, jobs by descending cost, then output tokens.
    """
    jobs: dict[str, dict[str, Any]] = {}
    models: dict[str, str] = {}
    job_of_run: dict[str, str] = {}
    seen: set[str] = set()
    for run_id, model, session_id, job in _runs_since(ledger, since):
        entry = jobs.setdefault(job, {"job": job, "sessions": 0, "runs": 0})
        if session_id not in seen:
            seen.add(session_id)
            entry["sessions"] += 1
        entry["runs"] += 1
        models[run_id] = model
        job_of_run[run_id] = job
    per_run = _by_run(ledger, models, table)
    per_job: dict[str, UsageTally] = {job: UsageTally(table) for job in jobs}
    for run_id, tally in per_run.items():
        per_job[job_of_run[run_id]] = per_job[job_of_run[run_id]].merge([tally])
    rows = [{**jobs[job], **per_job[job].as_json()} for job in jobs]
    rows.sort(key=lambda r: (-(r["cost_usd"] or 0.0), -r["output_tokens"], r["job"]))
    return {
        "since": since.isoformat() if since else None,
        "priced": table is not None,
        "jobs": rows,
        "total": UsageTally(table).merge(per_job.values()).as_json(),
    }


def parse_since(text: str, *, now: datetime) -> datetime:
    """The start of ``--since``: a period back from ``now`` (``24h``, ``7d``) or an ISO time.

    An ISO time without an offset is UTC.

    Raises:
        UserError: neither a duration nor an ISO date/time.
    """
    from datetime import UTC, timedelta

    from nahida_workers.errors import UserError
    from nahida_workers.schedules.model import parse_duration

    try:
        return now - timedelta(seconds=parse_duration(text))
    except (ValueError, OverflowError):
        pass
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(
            f"--since {text!r}: give a period (30m, 24h, 7d) or an ISO date/time"
        ) from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _runs_since(ledger: Any, since: datetime | None) -> Iterator[tuple[str, str, str, str]]:
    """``(run_id, model, session_id, job)`` of the runs started at or after ``since``.

    One query on a SQL ledger (runs joined to their sessions and batches);
    the in-memory twin is walked session by session.
    """
    engine = getattr(ledger, "engine", None)
    if engine is None:
        batch_jobs: dict[str, str] = {}
        for session in ledger.sessions():
            job = NO_BATCH
            if session.batch_id is not None:
                if session.batch_id not in batch_jobs:
                    batch = ledger.get_batch(session.batch_id)
                    batch_jobs[session.batch_id] = batch.job_name if batch else NO_BATCH
                job = batch_jobs[session.batch_id]
            for run in ledger.runs_of(session.session_id):
                if since is None or run.started_at >= since:
                    yield run.run_id, run.model, session.session_id, job
        return
    from datetime import UTC

    from sqlalchemy import select

    from nahida_workers.ledger import schema as t
    from nahida_workers.ledger.sql_base import utc

    r, s, b = t.agent_runs, t.sessions, t.batches
    query = select(r.c.run_id, r.c.model, r.c.session_id, b.c.job_name, r.c.started_at).select_from(
        r.join(s, s.c.session_id == r.c.session_id).outerjoin(b, b.c.batch_id == s.c.batch_id)
    )
    if since is not None and engine.dialect.name == "postgresql":
        query = query.where(r.c.started_at >= since)  # SQLite's text times: compared below
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(r.c.started_at)).all()
    for run_id, model, session_id, job, started in rows:
        at = utc(started)
        if since is None or (at is not None and at >= since.astimezone(UTC)):
            yield run_id, model, session_id, job or NO_BATCH
