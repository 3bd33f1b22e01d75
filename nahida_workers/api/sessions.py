"""``/v1`` routes about sessions: dispatch, inspect, steer, cancel.

Writes go through the same dispatcher and inbox the CLI uses: a session
posted here is validated like a job file (its provider is built, its tools
resolved), created durably with its idempotency key and published through
the outbox.  When the broker is down after the ledger recorded a request, the
answer is 202 with ``"delivered": false`` -- it will be delivered when the
broker is back.  Every status a route can answer is declared in its
``responses`` (:mod:`nahida_workers.api.openapi`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from nahida_workers.api.guard import error_body
from nahida_workers.api.idempotency import same_request
from nahida_workers.api.inputs import (
    allowed_workspace,
    check_inline_scripts,
    check_tool_names,
    strict,
)
from nahida_workers.api.models import (
    MAX_ID,
    Acted,
    RunView,
    SessionCreated,
    SessionIn,
    SessionView,
    SteerIn,
)
from nahida_workers.api.openapi import responses
from nahida_workers.api.policy import check_job_policy
from nahida_workers.cli.exits import is_delivery_failure
from nahida_workers.cli.ids import resolve
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import UserError
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.agents.discover import with_agents
from nahida_workers.runtime.dispatch.dispatcher import provider_labels
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.spec import JobSpec, validation_summary

__all__ = ["RECORDED_MESSAGE", "Tools", "checked_id", "session_routes"]

#: What a 202 with ``"delivered": false`` says (the CLI's exit 4 sentence).
RECORDED_MESSAGE = (
    "recorded; queued for delivery when the broker is back (do not repeat it; "
    "celery beat's sweeper publishes it)"
)


def checked_id(value: str) -> str:
    """``value`` if it can be an id or a prefix (1-64 printable ASCII); else a 404.

    Raises:
        HTTPException: 404 -- anything else names no session, run or batch.
    """
    if not value or len(value) > MAX_ID or not value.isascii() or not value.isprintable():
        raise HTTPException(404, f"no such id {value[:MAX_ID]!r}")
    return value


@dataclass(frozen=True)
class Tools:
    """The tool names a job posted here may name (the registered tools and ``Task``)."""

    names: frozenset[str]


def session_routes(v1: APIRouter, services: Any, tools: Tools) -> None:
    """Add ``POST /v1/sessions``, ``GET /v1/sessions/{id}``, ``GET /v1/runs/{id}`` and actions."""
    fleet = services.fleet

    @v1.post(
        "/sessions",
        operation_id="createSession",
        status_code=201,
        response_model=SessionCreated,
        responses=responses(
            403, 404, 409, body=True, ok={200: SessionCreated, 202: SessionCreated}
        ),
    )
    def create_session(
        body: SessionIn,  # documents the body; ``exact`` is its strict parse, the one used
        exact: SessionIn = Depends(strict(SessionIn)),
    ) -> JSONResponse:
        """Dispatch one session: 201 created; the same ``idempotency_key`` again returns it (200).

        400: the job's parts disagree (a script calls a tool the job does not
        offer, ``Task`` without ``agents``).  403: the workspace is outside
        NAHIDA_API_WORKSPACE_ROOTS.  404: no such directory.  409: the
        ``idempotency_key`` was used with a different body.  202: recorded,
        the broker is down; it is published when the broker is back.
        """
        return _create_session(fleet, exact, tools)

    _read_routes(v1, services)
    _action_routes(v1, services)


def _read_routes(v1: APIRouter, services: Any) -> None:
    """``GET /v1/sessions/{id}`` and ``GET /v1/runs/{id}``."""
    ledger = services.fleet.ledger

    @v1.get(
        "/sessions/{session_id}",
        operation_id="getSession",
        response_model=SessionView,
        responses=responses(400, 404),
    )
    def get_session(session_id: str) -> dict[str, Any]:
        """A session, its runs (oldest first), its child sessions and its usage (a prefix will do).

        ``usage``: the tokens the providers reported over its runs, with
        ``cost_usd`` when the server has a price table (NAHIDA_PRICES_FILE);
        ``GET /v1/sessions/{id}/tree`` has its children's.
        """
        from nahida_workers.spend import prices_of, sessions_usage

        full = resolve(ledger, "session", checked_id(session_id))
        session = ledger.get_session(full)
        assert session is not None
        children = [s.session_id for s in child_ledger(ledger).children(full)]
        spent = sessions_usage(ledger, [full], prices_of(services.fleet.settings))[full]
        return {
            "session": session.model_dump(mode="json"),
            "runs": [r.model_dump(mode="json") for r in ledger.runs_of(full)],
            "children": children,
            "usage": spent.as_json(),
        }

    @v1.get(
        "/runs/{run_id}",
        operation_id="getRun",
        response_model=RunView,
        responses=responses(400, 404),
    )
    def get_run(run_id: str) -> dict[str, Any]:
        """A run with every event in order, every receipt, and its usage (tokens, cost)."""
        from nahida_workers.spend import prices_of, run_usage

        full = resolve(ledger, "run", checked_id(run_id))
        run = ledger.get_run(full)
        assert run is not None
        return {
            "run": run.model_dump(mode="json"),
            "usage": run_usage(ledger, run, prices_of(services.fleet.settings)),
            "events": [e.model_dump(mode="json") for e in ledger.events(full)],
            "receipts": [r.model_dump(mode="json") for r in ledger.receipts(full)],
        }


def _action_routes(v1: APIRouter, services: Any) -> None:
    """``POST /v1/sessions/{id}/steer`` and ``.../cancel``."""
    fleet, ledger = services.fleet, services.fleet.ledger

    def _acted(what: str, exc: BaseException | None, **extra: Any) -> JSONResponse:
        body = {**extra, "recorded": True, "delivered": exc is None}
        if exc is not None:
            body["message"] = f"{what}: {RECORDED_MESSAGE}"
        return JSONResponse(body, status_code=202)

    @v1.post(
        "/sessions/{session_id}/steer",
        operation_id="steerSession",
        status_code=202,
        response_model=Acted,
        responses=responses(404, 429, body=True),
    )
    def steer(
        session_id: str,
        body: SteerIn,  # documents the body; ``exact`` is its strict parse, the one used
        exact: SteerIn = Depends(strict(SteerIn)),
    ) -> JSONResponse:
        """Steering input: taken at the running loop's next provider boundary (or the next run).

        The same ``message_id`` again is the same message (``created: false``).
        429: the session's inbox is full (NAHIDA_INBOX_MAX_USER pending).
        """
        full = resolve(ledger, "session", checked_id(session_id))
        message_id = exact.message_id or uuid.uuid4().hex
        try:
            _message, created = fleet.inbox.post(
                full, exact.text, message_id=message_id, next_turn=not exact.after_run
            )
        except Exception as exc:
            if not is_delivery_failure(exc):
                raise
            return _acted("steer", exc, message_id=message_id, created=True)
        return _acted("steer", None, message_id=message_id, created=created)

    @v1.post(
        "/sessions/{session_id}/cancel",
        operation_id="cancelSession",
        status_code=202,
        response_model=Acted,
        responses=responses(400, 404, 409),
    )
    def cancel(session_id: str) -> JSONResponse:
        """Stop the session's run at its next boundary (409 when it is already done)."""
        full = resolve(ledger, "session", checked_id(session_id))
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


def _create_session(fleet: Any, body: SessionIn, tools: Tools) -> JSONResponse:
    """Dispatch one session; 201 created, 200 known (idempotency key), 202 not yet published."""
    ledger = fleet.ledger
    check_tool_names(body.job, tools.names)
    try:
        job = JobSpec.model_validate(body.job.job_data())
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
        session = _recorded(ledger, wanted_id, body.idempotency_key)
        if session is None:
            raise
        created, delivered = True, False
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


def _recorded(ledger: Any, session_id: str, key: str | None) -> Any:
    """The session a failed publish left recorded: by its id, or by its idempotency key."""
    found = ledger.get_session(session_id)
    if found is not None or not key:
        return found
    return next((s for s in ledger.sessions() if s.idempotency_key == key), None)
