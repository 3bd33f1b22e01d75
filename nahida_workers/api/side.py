"""``POST /v1/sessions/{id}/ask``: a side conversation about a session.

The answer comes from a copy of the session's transcript with a provider
instance of its own (:mod:`nahida_workers.runtime.side`); nothing is written
to the session.  The exchange is recorded apart, as an artifact whose
sha256 the answer carries (``record``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from nahida_workers.api.guard import error_body
from nahida_workers.api.inputs import strict
from nahida_workers.api.models import AskIn, SideAnswerOut
from nahida_workers.api.openapi import responses
from nahida_workers.api.sessions import checked_id
from nahida_workers.cli.ids import resolve
from nahida_workers.errors import ProviderError

__all__ = ["side_routes"]


def side_routes(v1: APIRouter, services: Any) -> None:
    """Add ``POST /v1/sessions/{session_id}/ask``."""
    fleet = services.fleet

    @v1.post(
        "/sessions/{session_id}/ask",
        operation_id="askSession",
        response_model=SideAnswerOut,
        responses=responses(404, 502, body=True),
    )
    def ask(
        session_id: str,
        body: AskIn,  # documents the body; ``exact`` is its strict parse, the one used
        exact: AskIn = Depends(strict(AskIn)),
    ) -> JSONResponse:
        """Ask the session a side question; answered from a copy of its transcript.

        Every tool call in the answer is refused (``refused``); nothing enters
        the session's transcript or drives its task.  400: the session's
        scripted provider has no ``ask`` turns.  502: the provider failed.
        """
        from nahida_workers.runtime.ownership.driver import loop_config
        from nahida_workers.runtime.side import ask_session
        from nahida_workers.runtime.wiring import provider_for, registry_for

        full = resolve(fleet.ledger, "session", checked_id(session_id))
        try:
            answer = ask_session(
                fleet.ledger,
                full,
                exact.question,
                provider_for=provider_for,
                config_for=lambda spec: loop_config(spec, registry_for(spec, fleet.settings)),
                now=fleet.clock.now,
            )
        except ProviderError as exc:
            code = exc.failure_code.value  # a finite code, never the provider's raw text
            return error_body(502, "provider_error", f"the provider failed ({code})")
        return JSONResponse(SideAnswerOut.model_validate(asdict(answer)).model_dump(mode="json"))
