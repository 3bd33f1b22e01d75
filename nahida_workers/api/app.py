"""The HTTP API (``/v1``), served by ``nahida serve`` with the web view.

Reads go through the ledger's read methods, writes through the same
dispatcher and inbox the CLI uses (:mod:`nahida_workers.api.sessions`,
:mod:`nahida_workers.api.follow`).  In front of every route, outermost
first: the token (:mod:`~nahida_workers.api.auth`), the body limit
(:mod:`~nahida_workers.api.guard`), admission (:mod:`~nahida_workers.api.admission`).
The OpenAPI document is completed by :mod:`nahida_workers.api.openapi`.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI

from nahida_workers.api.access_log import RequestLog
from nahida_workers.api.admission import Admission, AdmissionLimits
from nahida_workers.api.auth import Auth
from nahida_workers.api.fleet import fleet_routes
from nahida_workers.api.follow import follow_routes
from nahida_workers.api.guard import BodyLimit, install_error_handlers
from nahida_workers.api.inputs import known_query_only
from nahida_workers.api.openapi import install_openapi
from nahida_workers.api.schedules import schedule_routes
from nahida_workers.api.services import Services
from nahida_workers.api.sessions import Tools, session_routes
from nahida_workers.api.side import side_routes
from nahida_workers.settings import Settings
from nahida_workers.web.live import LIVE_PREFIX
from nahida_workers.web.pages import web_router

__all__ = ["OPEN_PATHS", "UNGATED", "create_app", "registered_tools"]

#: Paths served without a token.
OPEN_PATHS = frozenset({"/healthz", "/login"})
#: Paths served without an admission slot: they never touch the ledger.
UNGATED = frozenset({"/healthz", "/login", "/openapi.json", "/docs", "/docs/oauth2-redirect"})


def registered_tools(settings: Settings) -> frozenset[str]:
    """The tool names a job posted over the API may name (what a registry is built from).

    The built-in tools, the operator's ``NAHIDA_EXTRA_TOOLS``, the installed
    ``nahida.tools`` entry points (:mod:`nahida_workers.tools.registration`)
    and ``Task``, which the runtime runs itself.
    """
    from nahida_workers.core.children import TASK_TOOL
    from nahida_workers.plugins import TOOL_GROUP, entry_points_of
    from nahida_workers.tools import default_tools
    from nahida_workers.tools.registration import load_tool

    names = {tool.spec.name for tool in default_tools()}
    names |= {load_tool(path).spec.name for path in settings.extra_tools}
    names |= set(entry_points_of(TOOL_GROUP))
    return frozenset({*names, TASK_TOOL})


def create_app(services: Services) -> FastAPI:
    """The ASGI app: ``/v1`` JSON API, the web pages, ``/openapi.json`` and ``/docs``.

    Its bounds come from ``services.fleet.settings``: the token
    (``NAHIDA_API_TOKEN``), the body limit, the admission limits, the
    policy the schema states.
    """
    settings = services.fleet.settings
    app = FastAPI(
        title="nahida-workers",
        version="1",
        description="Durable LLM agent sessions: dispatch, inspect, steer, cancel, follow.",
    )
    install_error_handlers(app)
    limits = AdmissionLimits(
        requests=settings.api_db_pool_size,
        queue_timeout_s=settings.api_queue_timeout_s,
        streams=settings.api_max_followers,
    )
    # Innermost first: the body is limited while Admission reads it, and a
    # request without the token takes no admission slot.
    app.add_middleware(Admission, limits=limits, exempt=UNGATED, is_stream=_is_stream)
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes)
    app.add_middleware(Auth, token=settings.api_token.get_secret_value(), open_paths=OPEN_PATHS)
    app.add_middleware(RequestLog)  # outermost: refusals by the token or the limits are logged too

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    tools = registered_tools(settings)
    v1 = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(known_query_only)])
    session_routes(v1, services, Tools(tools))
    side_routes(v1, services)
    follow_routes(v1, services)
    schedule_routes(v1, services, Tools(tools))
    fleet_routes(v1, services)
    app.include_router(v1)
    install_openapi(app, settings, tools)
    app.include_router(web_router(services))
    return app


def _is_stream(path: str) -> bool:
    """An event stream (bounded by ``NAHIDA_API_MAX_FOLLOWERS``).

    ``/v1/sessions/{id}/events``, and the console's live pages (``/console/live/...``).
    """
    if path.startswith(LIVE_PREFIX):
        return True
    return path.startswith("/v1/sessions/") and path.endswith("/events")
