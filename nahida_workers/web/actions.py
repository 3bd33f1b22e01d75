"""The console's actions: steer, cancel, pause / resume / trigger a schedule.

``POST /console/actions/...`` with a JSON body, answered in JSON: ``{"ok":
true, "message"}``, or the API's error shape ``{"error": {"code",
"message"}}`` whose message the page shows as it is -- a refused action
says why.  They act through what the API and the CLI act through: the inbox
(``fleet.inbox.post`` / ``cancel``, as ``POST /v1/sessions/{id}/steer`` and
``/cancel`` do), the schedule store and scheduler (as ``nahida schedule
pause|resume|trigger`` do).  Each one checks the CSRF token first
(:mod:`nahida_workers.web.csrf`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from nahida_workers.api.guard import error_body
from nahida_workers.api.sessions import RECORDED_MESSAGE, checked_id
from nahida_workers.cli.exits import is_delivery_failure
from nahida_workers.cli.ids import resolve
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import NotFoundError
from nahida_workers.web.csrf import CsrfGuard

__all__ = ["action_router", "find_schedule"]

#: Longest steering text the console sends (the API's own bound applies too).
MAX_STEER = 20_000


class SteerForm(BaseModel):
    """The steer form: the text to give the running loop."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(default="", max_length=MAX_STEER)


def _ok(message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "message": message, **extra})


def find_schedule(store: Any, ref: str) -> Any:
    """The live schedule named ``ref``, or whose id is (or starts with) ``ref``.

    Raises:
        NotFoundError: no live schedule matches, or a prefix matches several.
    """
    found = store.get(ref)
    if found is not None:
        return found
    matches = [s for s in store.live() if s.schedule_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    raise NotFoundError(f"no schedule {ref}")


def action_router(fleet: Any, csrf: CsrfGuard) -> APIRouter:
    """The action routes over ``fleet`` (ledger, inbox, dispatcher)."""
    router = APIRouter(prefix="/console/actions", include_in_schema=False)
    ledger = fleet.ledger

    def refused(request: Request) -> JSONResponse | None:
        why = csrf.refusal(request)
        return None if why is None else error_body(403, "csrf", why)

    @router.post("/sessions/{session_id}/steer")
    def steer(session_id: str, form: SteerForm, request: Request) -> JSONResponse:
        if (refusal := refused(request)) is not None:
            return refusal
        if not form.text.strip():
            return error_body(400, "empty", "refused: write a message to steer with")
        full = resolve(ledger, "session", checked_id(session_id))
        message_id = uuid.uuid4().hex
        try:
            fleet.inbox.post(full, form.text, message_id=message_id, next_turn=True)
        except Exception as exc:
            if not is_delivery_failure(exc):
                raise
            return _ok(f"steering {RECORDED_MESSAGE}", message_id=message_id)
        return _ok("steering recorded: taken at the next provider boundary", message_id=message_id)

    @router.post("/sessions/{session_id}/cancel")
    def cancel(session_id: str, request: Request) -> JSONResponse:
        if (refusal := refused(request)) is not None:
            return refusal
        full = resolve(ledger, "session", checked_id(session_id))
        session = ledger.get_session(full)
        if session is not None and session.status is SessionStatus.DONE:
            return error_body(
                409, "session_done", f"refused: session {full} is done; nothing to cancel"
            )
        return _ok(_cancel(fleet, full))

    _schedule_actions(router, fleet, refused)
    return router


def _cancel(fleet: Any, session_id: str) -> str:
    """Cancel ``session_id`` (a ledger fact, DESIGN.md section 8); what to tell the person."""
    try:
        report = fleet.inbox.cancel(session_id)
    except Exception as exc:
        if not is_delivery_failure(exc):
            raise
        return f"cancel {RECORDED_MESSAGE}"
    if session_id in report.sealed:  # no worker held it: sealed in the cancel's transaction
        return "cancelled: no worker held the session; it is sealed, its subtree too"
    return "cancel recorded: the session stops at its next boundary"


def _schedule_actions(
    router: APIRouter, fleet: Any, refused: Callable[[Request], JSONResponse | None]
) -> None:
    """``POST /console/actions/schedules/{ref}/pause|resume|trigger``."""
    from nahida_workers.schedules.sql import SqlScheduleStore

    store = SqlScheduleStore(fleet.ledger.engine)

    def set_paused(ref: str, paused: bool, request: Request) -> JSONResponse:
        if (refusal := refused(request)) is not None:
            return refusal
        schedule = find_schedule(store, checked_id(ref))
        word = "paused" if paused else "active"
        if schedule.paused == paused:
            return error_body(
                409, "no_change", f"refused: schedule {schedule.name} is already {word}"
            )
        store.set_paused(schedule.name, paused, at=fleet.clock.now())
        return _ok(f"schedule {schedule.name} {'paused' if paused else 'resumed'}")

    @router.post("/schedules/{ref}/pause")
    def pause(ref: str, request: Request) -> JSONResponse:
        return set_paused(ref, True, request)

    @router.post("/schedules/{ref}/resume")
    def resume(ref: str, request: Request) -> JSONResponse:
        return set_paused(ref, False, request)

    @router.post("/schedules/{ref}/trigger")
    def trigger(ref: str, request: Request) -> JSONResponse:
        from nahida_workers.schedules.scheduler import TickReport, build_scheduler

        if (refusal := refused(request)) is not None:
            return refusal
        schedule = find_schedule(store, checked_id(ref))
        report = TickReport()
        fire = build_scheduler(fleet).trigger(schedule.name, report=report)
        deferred = sum(n for _fire, n in report.deferred)
        message = f"schedule {schedule.name} fired: {fire.outcome.value}"
        if fire.batch_id:
            message += f", batch {fire.batch_id}"
        if deferred:
            message += f"; {deferred} session(s) {RECORDED_MESSAGE}"
        return _ok(message, batch_id=fire.batch_id, outcome=fire.outcome.value)
