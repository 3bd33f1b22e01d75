"""Live updates of the console: server-sent events that carry re-rendered page regions.

``GET /console/live/{view}?key=...&<the page's query>`` streams, for as long as
the page is open (at most ``NAHIDA_API_MAX_FOLLOW_S``; the browser's
``EventSource`` reconnects), one ``region`` event per live block of the page
whose HTML changed: ``{"region": name, "html": ...}`` -- changed since the
page was rendered (the page's URL carries a digest of its regions, ``v``),
then since the last event.  The stream re-reads
the page's context every :data:`POLL_S` seconds with the same builder the
page used (:mod:`nahida_workers.web.views`) and renders the template's
block of that name, so no page reloads and nothing is computed twice
differently.  The script (``static/console.js``) swaps the region's HTML.

Streams count against ``NAHIDA_API_MAX_FOLLOWERS`` like the API's event
stream (``api/app.py``) and hold no admission slot while they stream.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, HTTPException, Request
from jinja2 import Environment
from sse_starlette.sse import EventSourceResponse

from nahida_workers.web.views import Console

__all__ = [
    "LIVE_PREFIX",
    "POLL_S",
    "VERSION_PARAM",
    "live_router",
    "regions_digest",
    "render_regions",
]

LIVE_PREFIX = "/console/live/"
#: The query parameter carrying the digest of the regions the page was rendered with.
VERSION_PARAM = "v"
#: Seconds between two reads of a live page's context.
POLL_S = 1.0


def render_regions(
    env: Environment, template: str, regions: tuple[str, ...], context: Mapping[str, Any]
) -> dict[str, str]:
    """Each live block of ``template`` rendered alone with ``context``."""
    tmpl = env.get_template(template)
    ctx = tmpl.new_context(dict(context))
    return {name: "".join(tmpl.blocks[name](ctx)) for name in regions}


def regions_digest(regions: Mapping[str, str]) -> str:
    """A short digest of rendered regions (what a page was rendered with)."""
    digest = hashlib.sha256()
    for name in sorted(regions):
        digest.update(name.encode() + b"\0" + regions[name].encode() + b"\0")
    return digest.hexdigest()[:16]


def live_router(
    console: Console,
    env: Environment,
    common: Callable[[str, str, Mapping[str, str]], dict[str, Any]],
    *,
    longest_s: float,
    poll_s: float = POLL_S,
) -> APIRouter:
    """The ``/console/live/{view}`` stream for every view of ``console``.

    Args:
        common: ``(view, key, params) -> context`` the page adds to its own (CSRF, nav).
        longest_s: how long one stream lasts, seconds.
    """
    router = APIRouter(include_in_schema=False)

    @router.get(LIVE_PREFIX + "{view}")
    async def live(view: str, request: Request) -> EventSourceResponse:
        spec = console.views.get(view)
        if spec is None:
            raise HTTPException(404, f"no live view {view[:40]}")
        params = {k: v for k, v in request.query_params.items() if k not in ("key", VERSION_PARAM)}
        key = request.query_params.get("key", "")
        shown = request.query_params.get(VERSION_PARAM, "")

        def read() -> dict[str, str]:
            context = {**common(view, key, params), **spec.build(key, params)}
            return render_regions(env, spec.template, spec.regions, context)

        first = await anyio.to_thread.run_sync(read)  # a bad key is a 404 now, not mid-stream

        async def events() -> AsyncIterator[dict[str, str]]:
            sent = dict(first) if regions_digest(first) == shown else {}
            deadline = time.monotonic() + longest_s
            now: dict[str, str] | None = first
            while time.monotonic() < deadline:
                if now is None:
                    await anyio.sleep(poll_s)
                    if await request.is_disconnected():
                        return
                    try:
                        now = await anyio.to_thread.run_sync(read)
                    except Exception:  # an outage mid-stream: say so, the browser reconnects
                        yield {"event": "stale", "data": "{}"}
                        continue
                for name, html in now.items():
                    if sent.get(name) != html:
                        sent[name] = html
                        yield {
                            "event": "region",
                            "data": json.dumps({"region": name, "html": html}),
                        }
                now = None

        return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store"})

    return router
