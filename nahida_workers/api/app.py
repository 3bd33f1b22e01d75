"""The HTTP API (``/v1``), served by ``nahida serve`` with the web view.

Reads go through the ledger's read methods, writes through the same
dispatcher and inbox the CLI uses: a session posted here is validated like a
job file (its provider is built, its tools resolved), created durably with
its idempotency key and published through the outbox.  When the broker is
down after the ledger recorded a request, the answer is 202 with
``"delivered": false`` -- it will be delivered when the broker is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.api.guard import (
    BodyLimit,
    dumps,
    error_body,
    install_error_handlers,
    token_ok,
    unavailable,
)
from nahida_workers.api.idempotency import same_request
from nahida_workers.api.inputs import allowed_workspace, check_inline_scripts, known_query_only
from nahida_workers.api.policy import check_job_policy
from nahida_workers.api.services import Services
from nahida_workers.cli.exits import is_delivery_failure
from nahida_workers.cli.ids import resolve
from nahida_workers.cli.report import batch_report
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import UserError
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.agents.discover import with_agents
from nahida_workers.runtime.dispatch.dispatcher import provider_labels
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.spec import JobSpec, validation_summary
from nahida_workers.web.pages import web_router

__all__ = ["create_app"]

#: Most characters of an id or prefix accepted in a path.
MAX_ID = 64
#: What a 202 with ``"delivered": false`` says (the CLI's exit 4 sentence).
RECORDED_MESSAGE = (
    "recorded; queued for delivery when the broker is back (do not repeat it; "
    "celery beat's sweeper publishes it)"
)


class SessionIn(BaseModel):
    """``POST /v1/sessions``: a job (as in a job file) applied to one workspace."""

    model_config = ConfigDict(extra="forbid")

    job: dict[str, Any] = Field(description="A job: name, prompt, provider, tools, contract...")
    workspace: str = Field(min_length=1, max_length=4096, description="A directory on the fleet.")
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=200, description="The same key twice is one session."
    )


class SteerIn(BaseModel):
    """``POST /v1/sessions/{id}/steer``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=64 * 1024)
    message_id: str | None = Field(None, min_length=1, max_length=200)
    after_run: bool = False


def _id(value: str) -> str:
    if not value or len(value) > MAX_ID or not value.isascii() or not value.isprintable():
        raise HTTPException(404, f"no such id {value[:MAX_ID]!r}")
    return value


def create_app(services: Services, *, token: str = "", max_body_bytes: int = 256 * 1024) -> FastAPI:
    """The ASGI app: ``/v1`` JSON API, the web pages, ``/openapi.json`` and ``/docs``."""
    app = FastAPI(
        title="nahida-workers",
        version="1",
        description="Durable LLM agent sessions: dispatch, inspect, steer, cancel, follow.",
    )
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Any:
        open_paths = ("/healthz", "/login")
        if request.url.path not in open_paths and not token_ok(request, token):
            return error_body(401, "unauthorized", "a bearer token is required")
        try:
            return await call_next(request)
        except Exception as exc:  # an outage (503) or a bug (500): JSON, one log line
            return unavailable(exc)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    v1 = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(known_query_only)])
    _session_routes(v1, services)
    _action_routes(v1, services)
    _follow_routes(v1, services)
    _batch_routes(v1, services)
    _team_routes(v1, services)
    app.include_router(v1)
    app.include_router(web_router(services))
    return app


def _session_routes(v1: APIRouter, services: Services) -> None:
    """``POST /v1/sessions``, ``GET /v1/sessions/{id}``, ``GET /v1/runs/{id}``."""
    fleet, ledger = services.fleet, services.fleet.ledger

    @v1.post("/sessions", status_code=201)
    def create_session(body: SessionIn) -> JSONResponse:
        """Dispatch one session; the same ``idempotency_key`` again returns it (200)."""
        return _create_session(fleet, body)

    @v1.get("/sessions/{session_id}")
    def get_session(session_id: str) -> dict[str, Any]:
        """A session, its runs (oldest first) and its child sessions."""
        full = resolve(ledger, "session", _id(session_id))
        session = ledger.get_session(full)
        assert session is not None
        children = [s.session_id for s in child_ledger(ledger).children(full)]
        return {
            "session": session.model_dump(mode="json"),
            "runs": [r.model_dump(mode="json") for r in ledger.runs_of(full)],
            "children": children,
        }

    @v1.get("/runs/{run_id}")
    def get_run(run_id: str) -> dict[str, Any]:
        """A run with every event in order and every receipt."""
        full = resolve(ledger, "run", _id(run_id))
        run = ledger.get_run(full)
        assert run is not None
        return {
            "run": run.model_dump(mode="json"),
            "events": [e.model_dump(mode="json") for e in ledger.events(full)],
            "receipts": [r.model_dump(mode="json") for r in ledger.receipts(full)],
        }


def _action_routes(v1: APIRouter, services: Services) -> None:
    """``POST /v1/sessions/{id}/steer`` and ``.../cancel``."""
    fleet, ledger = services.fleet, services.fleet.ledger

    def _acted(what: str, exc: BaseException | None, **extra: Any) -> JSONResponse:
        body = {**extra, "recorded": True, "delivered": exc is None}
        if exc is not None:
            body["message"] = f"{what}: {RECORDED_MESSAGE}"
        return JSONResponse(body, status_code=202)

    @v1.post("/sessions/{session_id}/steer", status_code=202)
    def steer(session_id: str, body: SteerIn) -> JSONResponse:
        """Steering input: taken at the running loop's next provider boundary (or the next run)."""
        full = resolve(ledger, "session", _id(session_id))
        message_id = body.message_id or uuid.uuid4().hex
        try:
            _message, created = fleet.inbox.post(
                full, body.text, message_id=message_id, next_turn=not body.after_run
            )
        except Exception as exc:
            if not is_delivery_failure(exc):
                raise
            return _acted("steer", exc, message_id=message_id, created=True)
        return _acted("steer", None, message_id=message_id, created=created)

    @v1.post("/sessions/{session_id}/cancel", status_code=202)
    def cancel(session_id: str) -> JSONResponse:
        """Stop the session's run at its next boundary (409 when it is already done)."""
        full = resolve(ledger, "session", _id(session_id))
        session = ledger.get_session(full)
        if session is not None and session.status is SessionStatus.DONE:
            return error_body(409, "session_done", f"session {full} is done; nothing to cancel")
        try:
            fleet.inbox.cancel(full)
        except Exception as exc:
            if not is_delivery_failure(exc):
                raise
            return _acted("cancel", exc, session_id=full)
        return _acted("cancel", None, session_id=full)


def _follow_routes(v1: APIRouter, services: Services) -> None:
    """``GET /v1/sessions/{id}/events``: server-sent events."""
    fleet, ledger = services.fleet, services.fleet.ledger

    def get_services() -> Services:
        return services

    @v1.get("/sessions/{session_id}/events")
    def events(
        session_id: str,
        timeout: float = Query(300.0, gt=0, le=3600, description="Seconds to follow."),
        svc: Services = Depends(get_services),
    ) -> StreamingResponse:
        """Server-sent events: the session's user-visible events (its channel policy decides).

        The history first, then new events until the session's current run is
        done (``event: done``) or ``timeout`` seconds pass.
        """
        from nahida_workers.runtime.observe.channel import stream_key

        full = resolve(ledger, "session", _id(session_id))
        key = stream_key(full, fleet.settings.redis_key_prefix)
        return StreamingResponse(
            _sse(svc.redis, key, lambda: _done(full), timeout),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    def _done(session_id: str) -> bool:
        session = ledger.get_session(session_id)
        return session is not None and session.status is SessionStatus.DONE


def _batch_routes(v1: APIRouter, services: Services) -> None:
    """``GET /v1/batches`` and ``GET /v1/batches/{id}``."""
    ledger = services.fleet.ledger

    @v1.get("/batches")
    def list_batches(
        limit: int | None = Query(None, ge=1, le=10_000, description="At most this many."),
    ) -> dict[str, Any]:
        """Every batch (or the newest ``limit``), newest first, with its session counts."""
        from nahida_workers.cli.render import batches_rows

        rows = batches_rows(ledger)
        return {"batches": rows if limit is None else rows[:limit]}

    @v1.get("/batches/{batch_id}")
    def get_batch(batch_id: str) -> dict[str, Any]:
        """A batch's report: one row per session (state, reason, turns, calls, evidence)."""
        full = resolve(ledger, "batch", _id(batch_id))
        return batch_report(ledger, full)


def _team_routes(v1: APIRouter, services: Services) -> None:
    """``GET /v1/teams/{team_id}`` (DESIGN.md section 8)."""
    ledger = services.fleet.ledger

    @v1.get("/teams/{team_id}")
    def get_team(team_id: str) -> dict[str, Any]:
        """A team: its members and their states, the task graph with owners, the claim history.

        Read from the ledger only.  A team's id is its lead's session id (a
        unique prefix works).
        """
        from nahida_workers.ledger.teams import team_ledger
        from nahida_workers.runtime.teams.projection import team_document

        full = resolve(ledger, "team", _id(team_id))
        return team_document(ledger, team_ledger(ledger), full)


def _create_session(fleet: Any, body: SessionIn) -> JSONResponse:
    """Dispatch one session; 201 created, 200 known (idempotency key), 202 not yet published."""
    ledger = fleet.ledger
    try:
        job = JobSpec.model_validate({"name": "api", **body.job})
    except ValidationError as exc:
        raise UserError(f"invalid job: {validation_summary(exc)}") from None
    spec = job.session_spec()
    check_inline_scripts(spec)  # before anything reads a script: no file is opened here
    check_job_policy(spec, fleet.settings)  # stop hooks, key variables, base URLs
    workspace = allowed_workspace(body.workspace, fleet.settings.api_workspace_root_paths)
    # Agent definitions from the config folder (and the workspace's, if the job
    # trusts it) join the job's; they pass the same checks as the job's own.
    spec = with_agents(spec, settings=fleet.settings, workspace=workspace)
    check_inline_scripts(spec)
    check_job_policy(spec, fleet.settings)
    check_spec(spec, fleet.settings)  # tools, provider and script, as `nahida batch` checks
    provider, model = provider_labels(spec)
    delivered = True
    wanted_id = uuid.uuid4().hex  # known before the write, so a broker failure can find it
    try:
        session, created = fleet.dispatcher.submit(
            spec,
            workspace=str(workspace),
            idempotency_key=body.idempotency_key,
            session_id=wanted_id,
            provider_name=provider,
            model=model,
            priority=job.priority,
        )
    except Exception as exc:
        if not is_delivery_failure(exc):
            raise
        # The session row and its outbox row are committed before the
        # publish: the sweeper publishes it when the broker is back.
        recorded = ledger.get_session(wanted_id) or next(
            (
                s
                for s in ledger.sessions()
                if body.idempotency_key and s.idempotency_key == body.idempotency_key
            ),
            None,
        )
        if recorded is None:
            raise
        session, created, delivered = recorded, True, False
    if not created and not same_request(
        session, spec, str(workspace), inline_max_bytes=fleet.dispatcher.prompt_inline_max_bytes
    ):
        return error_body(
            409,
            "idempotency_key_reused",
            f"idempotency_key {body.idempotency_key!r} was used for session "
            f"{session.session_id} with a different request body; use a new key",
        )
    data: dict[str, Any] = {
        "session": session.model_dump(mode="json"),
        "created": created,
        "recorded": True,
        "delivered": delivered,
    }
    if not delivered:
        data["message"] = f"session {session.session_id}: {RECORDED_MESSAGE}"
    status = 202 if not delivered else 201 if created else 200
    return JSONResponse(data, status_code=status)


def _sse(client: Any, key: str, session_done: Any, timeout_s: float) -> Iterator[str]:
    """The stream as SSE frames (``id``, ``event``, ``data``); a comment every idle second."""
    from nahida_workers.cli.session_cmds import _entry

    last = "0-0"
    for entry_id, fields in client.xrange(key, "-", "+"):
        last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        kind, payload = _entry(fields)
        yield f"id: {last}\nevent: {kind}\ndata: {dumps(payload)}\n\n"
    if session_done():
        yield "event: end\ndata: {}\n\n"
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = client.xread({key: last}, block=1000, count=100) or []
        if not got:
            yield ": idle\n\n"
            continue
        for _stream, entries in got:
            for entry_id, fields in entries:
                last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                kind, payload = _entry(fields)
                yield f"id: {last}\nevent: {kind}\ndata: {dumps(payload)}\n\n"
                if kind == "done":
                    yield "event: end\ndata: {}\n\n"
                    return
    yield "event: timeout\ndata: {}\n\n"
