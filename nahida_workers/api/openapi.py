"""The OpenAPI document of ``/v1``: every status each route answers, this server's policy, links.

FastAPI generates the document from the routes and :mod:`nahida_workers.api.models`;
this module adds what the generated one leaves out:

* every error status a route can answer, with the error body
  (:func:`responses`), ``Retry-After`` on 503 and ``WWW-Authenticate`` on 401;
* what this server's settings allow: the registered tool names, the API
  job policy's base URLs, key variables and stop hooks (a value outside them
  is refused with 422, so the schema says so);
* the id pattern of path parameters (anything else is a 404);
* the bearer token (and the login cookie) when ``NAHIDA_API_TOKEN`` is set;
* links from a created session to what can be done with it, from a session
  to its runs and its tree, from the batch list to a batch, from a created
  schedule to its actions (what a client, or schemathesis's stateful phase,
  follows);
* an example request body and success answer for every operation
  (:mod:`nahida_workers.api.examples`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from nahida_workers.api.examples import add_examples
from nahida_workers.api.inputs import RUNTIME_TOOLS
from nahida_workers.api.models import ID_PATTERN, MAX_ID, ErrorBody
from nahida_workers.settings import Settings

__all__ = ["install_openapi", "responses"]

_DESCRIPTIONS = {
    400: "Malformed JSON, a job whose parts disagree or a schedule's timing that does not "
    "hold (`invalid_request`), an ambiguous id prefix, or a `since` that is no period.",
    401: "No token (`unauthorized`) or a wrong one (`invalid_token`).",
    403: "The workspace is outside NAHIDA_API_WORKSPACE_ROOTS.",
    404: "No such session, run, batch, schedule or workspace directory.",
    409: "The idempotency key was used with another body, the session is done, or the "
    "schedule name is taken.",
    413: "The body is over NAHIDA_API_MAX_BODY_BYTES.",
    415: "A body that is not `application/json`.",
    422: "A value outside the schema, or a query parameter the route does not declare.",
    429: "The session's inbox is full.",
    502: "The session's provider failed to answer (`provider_error`).",
    503: "The server is at a limit (`busy`: a request slot, a ledger connection, a row lock) or "
    "the ledger or broker is down; retry after `Retry-After` seconds.",
}
_HEADERS = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer."}},
    503: {
        "Retry-After": {
            "schema": {"type": "integer", "minimum": 1},
            "description": "Seconds to wait before trying again.",
        }
    },
}
#: What every ``/v1`` route can answer, whatever it does.
_ALWAYS = (401, 413, 422, 503)


def responses(
    *codes: int, body: bool = False, ok: dict[int, type[BaseModel]] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route: its error ``codes`` and the ones every route has.

    Args:
        codes: error statuses this route answers besides 401, 413, 422 and 503.
        body: the route reads a JSON body (adds 400 malformed JSON, 415 wrong media type).
        ok: other success statuses and their models (e.g. 200 beside a 201).
    """
    wanted = set(codes) | set(_ALWAYS) | ({400, 415} if body else set())
    out: dict[int | str, dict[str, Any]] = {
        status: {"model": model, "description": model.__doc__ or "OK"}
        for status, model in (ok or {}).items()
    }
    for status in sorted(wanted):
        out[status] = {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
        if status in _HEADERS:
            out[status]["headers"] = _HEADERS[status]
    return out


def install_openapi(app: FastAPI, settings: Settings, tool_names: Iterable[str]) -> None:
    """Make ``app.openapi()`` (and ``/openapi.json``) return the completed document."""
    names = sorted(set(tool_names))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _policy(document, settings, names)
            _id_parameters(document)
            _security(document, settings)
            _links(document)
            add_examples(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _schemas(document: dict[str, Any]) -> dict[str, Any]:
    return document.setdefault("components", {}).setdefault("schemas", {})  # type: ignore[no-any-return]


def _string_branch(prop: dict[str, Any]) -> dict[str, Any]:
    """The ``{"type": "string"}`` part of a (possibly nullable) property schema."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "string":
            return branch  # type: ignore[no-any-return]
    raise KeyError("no string branch")


def _array_items(prop: dict[str, Any]) -> dict[str, Any]:
    """The ``items`` of the array part of a (possibly nullable) property schema."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "array":
            return branch["items"]  # type: ignore[no-any-return]
    raise KeyError("no array branch")


def _policy(document: dict[str, Any], settings: Settings, tools: list[str]) -> None:
    """Write the registered tools and the API job policy into the job's schema."""
    schemas = _schemas(document)
    hooks, key_envs, base_urls = settings.api_job_policy
    for model in ("JobIn", "AgentProfileIn"):
        _array_items(schemas[model]["properties"]["tools"])["enum"] = tools
    callable_names = sorted({*tools, *RUNTIME_TOOLS})
    schemas["ScriptedCallIn"]["properties"]["name"]["enum"] = callable_names
    for model in ("OpenAIProviderIn", "AnthropicProviderIn"):
        props = schemas[model]["properties"]
        for field, allowed in (("base_url", base_urls), ("api_key_env", key_envs)):
            if allowed:
                _string_branch(props[field])["enum"] = sorted(allowed)
            else:  # nothing allowed: the field may not be named
                props[field] = {"type": "null", "description": props[field].get("description")}
    if not settings.api_allow_network:  # only false is taken (NAHIDA_API_ALLOW_NETWORK)
        for model in ("JobIn", "AgentProfileIn"):
            schemas[model]["properties"]["network"]["const"] = False
    stop_hooks = schemas["JobIn"]["properties"]["stop_hooks"]
    if hooks:
        stop_hooks["items"]["enum"] = sorted(hooks)
    else:
        stop_hooks["maxItems"] = 0


def _id_parameters(document: dict[str, Any]) -> None:
    """Ids and unique prefixes in paths: 1-64 printable ASCII characters (else 404)."""
    for item in document.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    parameter["schema"] |= {"pattern": ID_PATTERN, "maxLength": MAX_ID}


def _security(document: dict[str, Any], settings: Settings) -> None:
    """The bearer token (or the login cookie), when the server has one."""
    if not settings.api_token.get_secret_value():
        return
    document.setdefault("components", {})["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "NAHIDA_API_TOKEN."},
        "cookie": {
            "type": "apiKey",
            "in": "cookie",
            "name": "nahida_token",
            "description": "Set by POST /login (browsers).",
        },
    }
    document["security"] = [{"bearer": []}, {"cookie": []}]


def _link(operation: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation, "parameters": parameters}


def _links(document: dict[str, Any]) -> None:
    """Links from each answer to the operations its ids lead to."""
    created = "$response.body#/session/session_id"
    session_links = {
        "getSession": _link("getSession", session_id=created),
        "steerSession": _link("steerSession", session_id=created),
        "cancelSession": _link("cancelSession", session_id=created),
        "followSession": _link("followSession", session_id=created),
        "askSession": _link("askSession", session_id=created),
    }
    paths = document["paths"]
    for status in ("200", "201", "202"):
        paths["/v1/sessions"]["post"]["responses"][status]["links"] = session_links
    paths["/v1/sessions/{session_id}"]["get"]["responses"]["200"]["links"] = {
        "getRun": _link("getRun", run_id="$response.body#/runs/0/run_id"),
        "steerSession": _link("steerSession", session_id="$response.body#/session/session_id"),
    }
    paths["/v1/batches"]["get"]["responses"]["200"]["links"] = {
        "getBatch": _link("getBatch", batch_id="$response.body#/batches/0/batch_id"),
    }
    paths["/v1/sessions/{session_id}"]["get"]["responses"]["200"]["links"]["getSessionTree"] = (
        _link("getSessionTree", session_id="$response.body#/session/session_id")
    )
    named = "$response.body#/name"
    schedule_links = {
        op: _link(op, name=named)
        for op in (
            "getSchedule",
            "pauseSchedule",
            "resumeSchedule",
            "triggerSchedule",
            "removeSchedule",
        )
    }
    paths["/v1/schedules"]["post"]["responses"]["201"]["links"] = schedule_links
    paths["/v1/schedules"]["get"]["responses"]["200"]["links"] = {
        "getSchedule": _link("getSchedule", name="$response.body#/schedules/0/name"),
    }
    paths["/v1/schedules/{name}"]["delete"]["responses"]["200"]["links"] = {
        "getRemovedSchedule": _link("getRemovedSchedule", name="$response.body#/schedule_id"),
    }
    for action in ("pause", "resume"):
        paths[f"/v1/schedules/{{name}}/{action}"]["post"]["responses"]["200"]["links"] = {
            "getSchedule": _link("getSchedule", name=named)
        }
