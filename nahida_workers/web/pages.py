"""The web view served by ``nahida serve``: HTML from the ledger.

``/`` lists batches (and sessions outside any batch), ``/batches/{id}`` a
batch's sessions, ``/sessions/{id}`` a session's runs, its parent and its
children (``sessions.parent_id``), ``/runs/{id}`` a run's timeline (SVG drawn
here, :mod:`nahida_workers.web.timeline`) and its events.  Jinja2 escapes
every value.  ``/login`` (:mod:`nahida_workers.web.login`) gives a browser
the token's cookie when ``NAHIDA_API_TOKEN`` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, Response
from jinja2 import DictLoader, Environment, select_autoescape
from markupsafe import Markup

from nahida_workers.cli.ids import resolve, shortener
from nahida_workers.cli.report import batch_report
from nahida_workers.ledger.children import child_ledger
from nahida_workers.web.login import login_router
from nahida_workers.web.templates import TEMPLATES
from nahida_workers.web.timeline import bars_of, overlapping_pairs, timeline_svg

if TYPE_CHECKING:
    from nahida_workers.api.services import Services

__all__ = ["placements_of", "web_router"]

_env = Environment(loader=DictLoader(TEMPLATES), autoescape=select_autoescape(default=True))


def _render(name: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context))


def placements_of(config: dict[str, Any], settings: Any) -> dict[str, str]:
    """Tool name -> ``remote`` / ``local`` / ``inline`` as the session's snapshot declares it.

    ``remote`` becomes ``local`` when the fleet runs remote calls in the local
    pool (``NAHIDA_REMOTE_TOOLS=false``, the embedded mode).
    """
    from nahida_workers.runtime.spec import SessionSpec
    from nahida_workers.runtime.wiring import registry_for

    try:
        spec = SessionSpec.model_validate(config)
        registry = registry_for(spec, settings)
    except Exception:  # a plugin tool that does not load here: show no placement
        return {}
    out: dict[str, str] = {}
    for name in registry.names():
        placement = registry.placement_of(name)
        value = "inline" if placement is None else placement.value
        if value == "remote" and not settings.remote_tools:
            value = "local"
        out[name] = value
    return out


def _check(value: str) -> str:
    if not value or len(value) > 64 or not value.isascii() or not value.isprintable():
        raise HTTPException(404, "no such id")
    return value


def web_router(services: Services) -> APIRouter:
    """The HTML pages over ``services``' ledger."""
    router = APIRouter(include_in_schema=False)
    _add_listing_pages(router, services.fleet.ledger)
    _add_run_pages(router, services.fleet)
    token = services.fleet.settings.api_token.get_secret_value()
    router.include_router(login_router(_env, token))
    return router


def _add_listing_pages(router: APIRouter, ledger: Any) -> None:
    """``/``, ``/batches/{id}`` and ``/sessions/{id}``."""

    @router.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        from nahida_workers.cli.render import batches_rows

        loose = [s for s in ledger.sessions() if s.batch_id is None and s.parent_id is None]
        return _render("index.html", batches=batches_rows(ledger), sessions=loose[-100:])

    @router.get("/batches/{batch_id}", response_class=HTMLResponse)
    def batch_page(batch_id: str) -> HTMLResponse:
        full = resolve(ledger, "batch", _check(batch_id))
        report = batch_report(ledger, full)
        short = shortener(
            [r["session_id"] for r in report["sessions"]]
            + [r["run_id"] for r in report["sessions"] if r["run_id"]]
        )
        return _render("batch.html", report=report, short=short)

    @router.get("/sessions/{session_id}", response_class=HTMLResponse)
    def session_page(session_id: str) -> HTMLResponse:
        full = resolve(ledger, "session", _check(session_id))
        session = ledger.get_session(full)
        assert session is not None
        runs = ledger.runs_of(full)
        children = child_ledger(ledger).children(full)
        return _render("session.html", session=session, runs=runs, children=children)


def _add_run_pages(router: APIRouter, fleet: Any) -> None:
    """``/runs/{id}`` and ``/runs/{id}/timeline.svg``."""
    ledger = fleet.ledger

    @router.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(run_id: str) -> HTMLResponse:
        full = resolve(ledger, "run", _check(run_id))
        run, svg, bars, events = _timeline(full)
        return _render(
            "run.html",
            run=run,
            svg=Markup(svg),  # built from escaped parts by timeline_svg
            overlaps=overlapping_pairs(bars),
            events=events,
        )

    @router.get("/runs/{run_id}/timeline.svg")
    def run_svg(run_id: str) -> Response:
        full = resolve(ledger, "run", _check(run_id))
        _run, svg, _bars, _events = _timeline(full)
        return Response(svg, media_type="image/svg+xml")

    def _timeline(run_id: str) -> tuple[Any, str, Any, Any]:
        run = ledger.get_run(run_id)
        assert run is not None
        session = ledger.get_session(run.session_id)
        placement = placements_of(session.config, fleet.settings) if session else {}
        events = ledger.events(run_id)
        bars = bars_of(events, ledger.receipts(run_id), placement=placement)
        return run, timeline_svg(bars, title=f"run {run_id}"), bars, events
