"""The web console served by ``nahida serve``: HTML pages, their live stream, their actions.

Pages (server-rendered, :mod:`nahida_workers.web.views` builds what each
shows; templates in ``web/templates/``):

* ``/`` the dashboard; ``/sessions``, ``/batches``, ``/schedules``, ``/teams``
  paged lists with filters (state, job, batch, schedule, parent);
* ``/sessions/{id}`` runs, tree of child sessions, inbox, steer and cancel;
* ``/runs/{id}`` the run as a conversation and its timeline with its waits
  (``/runs/{id}/timeline.svg`` alone);
* ``/schedules/{name}`` its fires, pause / resume / trigger; ``/teams/{id}``.

Every page updates itself over server-sent events
(:mod:`nahida_workers.web.live`); actions are ``POST /console/actions/...``
(:mod:`nahida_workers.web.actions`) behind a CSRF token.  The same token as
the API guards all of it (``api/auth.py``); ``/login``
(:mod:`nahida_workers.web.login`) gives a browser its cookie.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from nahida_workers.cli.ids import resolve
from nahida_workers.web.actions import action_router
from nahida_workers.web.csrf import CsrfGuard
from nahida_workers.web.environment import HERE, console_environment
from nahida_workers.web.live import (
    LIVE_PREFIX,
    VERSION_PARAM,
    live_router,
    regions_digest,
    render_regions,
)
from nahida_workers.web.login import login_router
from nahida_workers.web.probe import BrokerProbe
from nahida_workers.web.views import Console, checked

if TYPE_CHECKING:
    from nahida_workers.api.services import Services

__all__ = ["CSP", "STATIC", "web_router"]

#: The console's static files: name -> media type (served from ``web/static/``).
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}

#: Every console page's Content-Security-Policy: its own script, styles and stream
#: only, and no framing (an action's button cannot be clicked through another site).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)

#: Page path -> (view, whether the path ends in a key).
ROUTES = {
    "/": ("dashboard", False),
    "/sessions": ("sessions", False),
    "/sessions/{key}": ("session", True),
    "/batches": ("batches", False),
    "/batches/{key}": ("batch", True),
    "/runs/{key}": ("run", True),
    "/schedules": ("schedules", False),
    "/schedules/{key}": ("schedule", True),
    "/teams": ("teams", False),
    "/teams/{key}": ("team", True),
}


def web_router(services: Services) -> APIRouter:
    """The console's pages, stream, actions, static files and login over ``services``."""
    fleet = services.fleet
    settings = fleet.settings
    env = console_environment()
    token = settings.api_token.get_secret_value()
    csrf = CsrfGuard(token)
    probe = BrokerProbe(settings.broker_url, getattr(services, "celery_app", None))
    console = Console(fleet, probe)
    statics = {name: (HERE / "static" / name).read_bytes() for name in STATIC}

    def common(view: str, key: str, params: Mapping[str, str]) -> dict[str, Any]:
        live = LIVE_PREFIX + view + "?" + urlencode({**params, "key": key})
        return {"csrf": csrf.token, "view": view, "key": key, "params": dict(params), "live": live}

    router = APIRouter(include_in_schema=False)
    for path, (view, keyed) in ROUTES.items():
        _add_page(router, path, view, keyed, console, env, common)

    @router.get("/runs/{run_id}/timeline.svg")
    def run_svg(run_id: str) -> Response:
        full = resolve(console.ledger, "run", checked(run_id))
        svg, _overlaps, _events = console.timeline(full)
        return Response(svg, media_type="image/svg+xml")

    @router.get("/console/static/{name}")
    def static(name: str) -> Response:
        if name not in statics:
            raise HTTPException(404, "no such file")
        return Response(
            statics[name], media_type=STATIC[name], headers={"Cache-Control": "no-cache"}
        )

    router.include_router(live_router(console, env, common, longest_s=settings.api_max_follow_s))
    router.include_router(action_router(fleet, csrf))
    router.include_router(login_router(env, token))
    return router


def _add_page(
    router: APIRouter,
    path: str,
    view: str,
    keyed: bool,
    console: Console,
    env: Any,
    common: Any,
) -> None:
    spec = console.views[view]

    def page(request: Request, key: str = "") -> HTMLResponse:
        params = {k: v for k, v in request.query_params.items() if k != VERSION_PARAM}
        if keyed:
            key = checked(key)
        context = {**common(view, key, params), **spec.build(key, params)}
        # The stream sends at once what changed between this render and its start.
        shown = render_regions(env, spec.template, spec.regions, context)
        context["live"] += "&" + urlencode({VERSION_PARAM: regions_digest(shown)})
        html = env.get_template(spec.template).render(**context)
        return HTMLResponse(
            html, headers={"Cache-Control": "no-store", "Content-Security-Policy": CSP}
        )

    router.add_api_route(path, page, methods=["GET"], response_class=HTMLResponse, name=view)
