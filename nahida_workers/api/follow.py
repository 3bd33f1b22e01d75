"""``/v1`` routes that read along: a session's event stream, the batches, the teams.

``GET /v1/sessions/{id}/events`` is server-sent events: the session's
user-visible events (its channel policy decides) from its Redis stream, the
history first, then new events until the current run is done or
``timeout`` seconds pass (at most ``NAHIDA_API_MAX_FOLLOW_S``).  A stream
holds no admission slot once it started; how many may be followed at once is
``NAHIDA_API_MAX_FOLLOWERS`` (:mod:`nahida_workers.api.admission`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from nahida_workers.api.guard import dumps
from nahida_workers.api.models import BatchList, BatchReport, TeamView
from nahida_workers.api.openapi import responses
from nahida_workers.api.sessions import checked_id
from nahida_workers.cli.ids import resolve
from nahida_workers.cli.report import batch_report
from nahida_workers.core.events import SessionStatus

__all__ = ["follow_routes"]

#: The 200 answer of the event stream, for the schema.
EVENT_STREAM = {
    "description": (
        "Server-sent events: `id`, `event` (commentary, tool_started, tool_result, final, "
        "done; then end or timeout) and `data` (JSON); a `: idle` comment every idle second."
    ),
    "content": {
        "text/event-stream": {
            # OpenAPI 3.2's itemSchema: one parsed event (comments are not events).
            "itemSchema": {
                "type": "object",
                "properties": {
                    "event": {"type": "string"},
                    "id": {"type": "string"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"type": "object"},
                    },
                },
                "required": ["event", "data"],
            }
        }
    },
}


def follow_routes(v1: APIRouter, services: Any) -> None:
    """Add the event stream, ``GET /v1/batches[/{id}]`` and ``GET /v1/teams/{id}``."""
    fleet, ledger = services.fleet, services.fleet.ledger
    longest = fleet.settings.api_max_follow_s

    @v1.get(
        "/sessions/{session_id}/events",
        operation_id="followSession",
        response_class=StreamingResponse,
        responses={200: EVENT_STREAM, **responses(400, 404)},
    )
    def events(
        session_id: str,
        timeout: float = Query(
            min(300.0, longest),
            gt=0,
            le=longest,
            description="Seconds to follow (at most NAHIDA_API_MAX_FOLLOW_S).",
        ),
    ) -> StreamingResponse:
        """Server-sent events: the history first, then new events until the run is done."""
        from nahida_workers.runtime.observe.channel import stream_key

        full = resolve(ledger, "session", checked_id(session_id))
        key = stream_key(full, fleet.settings.redis_key_prefix)

        def done() -> bool:
            session = ledger.get_session(full)
            return session is not None and session.status is SessionStatus.DONE

        return StreamingResponse(
            _sse(services.redis, key, done, timeout),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @v1.get("/batches", operation_id="listBatches", response_model=BatchList, responses=responses())
    def list_batches(
        limit: int | None = Query(None, ge=1, le=10_000, description="At most this many."),
    ) -> dict[str, Any]:
        """Every batch (or the newest ``limit``), newest first, with its session counts."""
        from nahida_workers.cli.render import batches_rows

        rows = batches_rows(ledger)
        return {"batches": rows if limit is None else rows[:limit]}

    @v1.get(
        "/teams/{team_id}",
        operation_id="getTeam",
        response_model=TeamView,
        responses=responses(400, 404),
    )
    def get_team(team_id: str) -> dict[str, Any]:
        """A team: its members and their states, the task graph with owners, the claim history.

        Read from the ledger only.  A team's id is its lead's session id (a
        unique prefix works).
        """
        from nahida_workers.ledger.teams import team_ledger
        from nahida_workers.runtime.teams.projection import team_document

        full = resolve(ledger, "team", checked_id(team_id))
        return team_document(ledger, team_ledger(ledger), full)

    @v1.get(
        "/batches/{batch_id}",
        operation_id="getBatch",
        response_model=BatchReport,
        responses=responses(400, 404),
    )
    def get_batch(batch_id: str) -> dict[str, Any]:
        """A batch's report: one row per session (state, reason, turns, calls, evidence, usage).

        ``usage``: the tokens the providers reported (per row: the session and
        its child sessions; at the top: the whole batch), with ``cost_usd``
        when the server has a price table (NAHIDA_PRICES_FILE).
        """
        from nahida_workers.spend import prices_of

        full = resolve(ledger, "batch", checked_id(batch_id))
        return batch_report(ledger, full, prices=prices_of(fleet.settings))


def _sse(
    client: Any, key: str, session_done: Callable[[], bool], timeout_s: float
) -> Iterator[str]:
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
        block_ms = max(1, min(1000, int((deadline - time.monotonic()) * 1000)))
        got = client.xread({key: last}, block=block_ms, count=100) or []
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
