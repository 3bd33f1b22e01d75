"""``/v1/schedules``: what ``nahida schedule`` does, over HTTP (DESIGN.md section 8).

list, show (a removed one and its fires: ``/v1/removed-schedules``), add, apply (idempotent;
removes none), pause, resume, trigger (fire now) and remove.  Schedules live
in the ledger, so a change takes effect at beat's next tick.  A schedule's
job is inline and passes the checks of ``POST /v1/sessions`` (registered
tools, inline scripts, the API job policy, the workspace roots for each
repository), then the checks ``nahida schedule add`` makes (the job's
provider and tools, the cron expression or interval, the time zone, the
durations against ``NAHIDA_SCHEDULE_TICK_S``): a bad one is a 4xx, never a
failed fire at 3 a.m.  Errors have the one shape ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from nahida_workers.api.guard import error_body
from nahida_workers.api.inputs import (
    allowed_workspace,
    check_inline_scripts,
    check_tool_names,
    strict,
)
from nahida_workers.api.openapi import responses
from nahida_workers.api.policy import check_job_policy
from nahida_workers.api.schedule_models import (
    Applied,
    ApplyIn,
    ScheduleIn,
    ScheduleList,
    ScheduleView,
    Triggered,
)
from nahida_workers.api.sessions import RECORDED_MESSAGE, Tools, checked_id
from nahida_workers.errors import UserError
from nahida_workers.runtime.spec import JobSpec, validation_summary
from nahida_workers.schedules.model import ScheduleDef
from nahida_workers.schedules.views import (
    find_schedule,
    fire_json,
    fires_with_usage,
    schedule_json,
)

__all__ = ["schedule_routes"]

#: Most fires ``GET /v1/schedules/{name}`` returns.
MAX_FIRES = 1000


def schedule_routes(v1: APIRouter, services: Any, tools: Tools) -> None:
    """Add the ``/v1/schedules`` routes (see the module docstring)."""
    from nahida_workers.schedules.sql import SqlScheduleStore

    fleet = services.fleet
    store = SqlScheduleStore(fleet.ledger.engine)

    def now() -> datetime:
        return fleet.clock.now()  # type: ignore[no-any-return]

    def view(schedule: Any, fires: int = 1, *, with_fires: bool = False) -> dict[str, Any]:
        history = store.fires(schedule.schedule_id, limit=fires)
        data = schedule_json(schedule, history, now())
        if with_fires:
            from nahida_workers.spend import prices_of

            prices = prices_of(fleet.settings)
            data["fires"] = fires_with_usage(fleet.ledger, history, prices)
        return data

    @v1.get(
        "/schedules",
        operation_id="listSchedules",
        response_model=ScheduleList,
        response_model_exclude_none=False,
        responses=responses(),
    )
    def list_schedules() -> dict[str, Any]:
        """Every live schedule by name: state, trigger, last and next fire (``schedule list``)."""
        return {"schedules": [view(s) for s in store.live()]}

    @v1.post(
        "/schedules",
        operation_id="createSchedule",
        status_code=201,
        response_model=ScheduleView,
        responses=responses(403, 404, 409, body=True),
    )
    def create_schedule(
        body: ScheduleIn,  # documents the body; ``exact`` is its strict parse, the one used
        exact: ScheduleIn = Depends(strict(ScheduleIn)),
    ) -> JSONResponse:
        """Add a schedule (``nahida schedule add``): 201 with its document; 409 if the name is live.

        400: the job, the cron expression or interval, the time zone or a
        duration is invalid (the message names it).  403: a repository is
        outside NAHIDA_API_WORKSPACE_ROOTS.  404: no such directory.
        """
        from nahida_workers.runtime.dispatch.dispatcher import new_id

        definition = _definition(fleet, exact, tools)
        if store.get(definition.name) is not None:
            return _exists(definition.name)
        schedule, _change = store.put(definition, schedule_id=new_id(), at=now())
        return JSONResponse(view(schedule, with_fires=True), status_code=201)

    @v1.post(
        "/schedules/apply",
        operation_id="applySchedules",
        response_model=Applied,
        responses=responses(403, 404, body=True),
    )
    def apply_schedules(
        body: ApplyIn,  # documents the body; ``exact`` is its strict parse, the one used
        exact: ApplyIn = Depends(strict(ApplyIn)),
    ) -> dict[str, Any]:
        """Create or update every schedule of the body (``nahida schedule apply``); removes none.

        All are checked before any is stored; the same body twice changes
        nothing the second time (``unchanged``).
        """
        from nahida_workers.runtime.dispatch.dispatcher import new_id

        names = [s.name for s in exact.schedules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UserError(f"schedule names must be unique: {', '.join(twice)}")
        definitions = [_definition(fleet, entry, tools) for entry in exact.schedules]
        at = now()
        results = []
        for definition in definitions:
            schedule, change = store.put(definition, schedule_id=new_id(), at=at)
            results.append(
                {"name": schedule.name, "schedule_id": schedule.schedule_id, "change": change.value}
            )
        return {"results": results}

    @v1.get(
        "/schedules/{name}",
        operation_id="getSchedule",
        response_model=ScheduleView,
        responses=responses(400, 404),
    )
    def get_schedule(
        name: str,
        fires: int = Query(20, ge=1, le=MAX_FIRES, description="How many of the newest fires."),
    ) -> dict[str, Any]:
        """A live schedule and its newest fires: each decision, its batch, who decided it, usage.

        By name, id or unique id prefix.  A removed schedule's fires stay in
        the ledger: ``GET /v1/removed-schedules/{name}``.
        """
        schedule = find_schedule(store, checked_id(name))
        return view(schedule, fires, with_fires=True)

    _removed_routes(v1, store, view)
    _action_routes(v1, fleet, store, view, now)


def _removed_routes(v1: APIRouter, store: Any, view: Any) -> None:
    """The removed schedules and their fires (they stay in the ledger)."""

    @v1.get(
        "/removed-schedules",
        operation_id="listRemovedSchedules",
        response_model=ScheduleList,
        responses=responses(),
    )
    def list_removed() -> dict[str, Any]:
        """Removed schedules, latest removal first (``schedule list --removed``)."""
        return {"schedules": [view(s) for s in store.removed()]}

    @v1.get(
        "/removed-schedules/{name}",
        operation_id="getRemovedSchedule",
        response_model=ScheduleView,
        responses=responses(400, 404),
    )
    def get_removed(
        name: str,
        fires: int = Query(20, ge=1, le=MAX_FIRES, description="How many of the newest fires."),
    ) -> dict[str, Any]:
        """A removed schedule and its fires, which stay in the ledger (``schedule show --removed``).

        By name (the latest removed under it), id or unique id prefix.
        """
        schedule = find_schedule(store, checked_id(name), removed=True)
        return view(schedule, fires, with_fires=True)  # type: ignore[no-any-return]


def _action_routes(v1: APIRouter, fleet: Any, store: Any, view: Any, now: Any) -> None:
    """pause, resume, trigger and remove."""

    def paused(name: str, value: bool) -> dict[str, Any]:
        schedule = find_schedule(store, checked_id(name))
        return view(store.set_paused(schedule.name, value, at=now()))  # type: ignore[no-any-return]

    @v1.post(
        "/schedules/{name}/pause",
        operation_id="pauseSchedule",
        response_model=ScheduleView,
        responses=responses(400, 404),
    )
    def pause(name: str) -> dict[str, Any]:
        """Stop firing until resumed (a trigger still fires); already paused: unchanged."""
        return paused(name, True)

    @v1.post(
        "/schedules/{name}/resume",
        operation_id="resumeSchedule",
        response_model=ScheduleView,
        responses=responses(400, 404),
    )
    def resume(name: str) -> dict[str, Any]:
        """Fire again from now on; fire times that passed while paused are not run."""
        return paused(name, False)

    @v1.post(
        "/schedules/{name}/trigger",
        operation_id="triggerSchedule",
        status_code=202,
        response_model=Triggered,
        responses=responses(400, 404),
    )
    def trigger(name: str) -> dict[str, Any]:
        """Fire now under the overlap policy (``nahida schedule trigger``); the fleet runs it.

        The fire's outcome is ``dispatched``, ``buffered``, ``skipped_overlap``
        or ``failed``; its sessions are followed with ``GET /v1/batches/{batch_id}``.
        """
        from nahida_workers.schedules.scheduler import TickReport, build_scheduler

        schedule = find_schedule(store, checked_id(name))
        report = TickReport()
        fire = build_scheduler(fleet).trigger(schedule.name, report=report)
        deferred = sum(n for _fire, n in report.deferred)
        data: dict[str, Any] = {
            "fire": fire_json(fire),
            "undelivered_sessions": deferred,
            "recorded": True,
            "delivered": deferred == 0,
        }
        if deferred:
            data["message"] = f"batch {fire.batch_id}: {deferred} session(s) {RECORDED_MESSAGE}"
        return data

    @v1.delete(
        "/schedules/{name}",
        operation_id="removeSchedule",
        response_model=ScheduleView,
        responses=responses(400, 404),
    )
    def remove(name: str) -> dict[str, Any]:
        """Remove a schedule: it fires no more; its fires stay (``/v1/removed-schedules``)."""
        schedule = find_schedule(store, checked_id(name))
        return view(store.remove(schedule.name, at=now()))  # type: ignore[no-any-return]


def _exists(name: str) -> JSONResponse:
    return error_body(
        409,
        "schedule_exists",
        f"schedule {name} exists; remove it first, or use POST /v1/schedules/apply to update it",
    )


def _definition(fleet: Any, body: ScheduleIn, tools: Tools) -> ScheduleDef:
    """The schedule's definition, checked as a posted session and as ``schedule add``.

    Raises:
        HTTPException: 422 (a tool, a script, the job policy), 403/404 (a repository).
        UserError: the job's parts disagree, it trusts its workspaces, a timing is
            invalid (400).
    """
    from nahida_workers.schedules.config import build_definition

    settings = fleet.settings
    check_tool_names(body.job, tools.names)
    try:
        job = JobSpec.model_validate(body.job.job_data())
    except ValidationError as exc:
        raise UserError(f"invalid job: {validation_summary(exc)}") from None
    if job.trust_workspace:
        # A schedule reads a workspace's agent files again at every fire, after
        # these checks: over the API it may not trust them.  A 400, not a 422:
        # the job schema (shared with sessions, which may) allows the field.
        raise UserError(
            "job.trust_workspace: a schedule over the API cannot trust its workspaces' agent "
            "definitions (add it with `nahida schedule add`)"
        )
    spec = job.session_spec()
    check_inline_scripts(spec)
    check_job_policy(spec, settings)
    roots = settings.api_workspace_root_paths
    repos = [str(allowed_workspace(repo, roots)) for repo in body.repos]
    return build_definition(
        name=body.name,
        job=body.job.job_data(),
        repos=repos,
        cron=body.cron,
        every=body.every,
        timezone=body.timezone,
        overlap=body.overlap,
        catchup_window=body.catchup_window,
        jitter=body.jitter,
        priority=body.priority,
        max_running=body.max_running,
        settings=settings,
    )
