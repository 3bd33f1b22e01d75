"""What a request may name on the server: inline provider scripts, tools, workspaces.

A job file on the command line may name a provider script by path (the
operator's own files).  Over the API a string would make the server read a
file a token holder chose -- and its error would tell whether the file
exists -- or parse YAML a token holder wrote, so a job posted to
``/v1/sessions`` carries its scripts as JSON (a mapping with ``turns`` or a
list of turns), in its provider, each fallback and each ``agents`` profile.
It names registered tools only (never ``module:attr``).  A workspace must be
an absolute path (422 otherwise); when ``NAHIDA_API_WORKSPACE_ROOTS`` is set
it must be inside one of those roots after symlinks and ``..`` are resolved
(403 otherwise, the same answer whether or not the path exists); then it
must be an existing directory (404 otherwise).  A query parameter a route
does not declare is a 422, not silently ignored (``/v1/batches?limt=5``
would otherwise list everything); a body that is not JSON is a 415.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from nahida_workers.api.models import JobIn
from nahida_workers.providers.scripted import reads_a_file
from nahida_workers.runtime.spec import SessionSpec

__all__ = [
    "RUNTIME_TOOLS",
    "allowed_workspace",
    "check_inline_scripts",
    "check_tool_names",
    "json_body",
    "known_query_only",
    "strict",
]

M = TypeVar("M", bound=BaseModel)


def provider_mappings(spec: SessionSpec) -> Iterator[tuple[str, Any]]:
    """``(field path, mapping)`` of the job's providers: its own, fallbacks, agents', verifier's."""
    todo: list[tuple[str, Any]] = [("job.provider", spec.provider)]
    todo += [(f"job.agents.{name}.provider", p.provider) for name, p in spec.agents.items()]
    todo.append(("job.verification.provider", spec.verification.provider))
    todo += [
        (f"job.verification.next_providers.{i}", p)
        for i, p in enumerate(spec.verification.next_providers)
    ]
    while todo:
        where, provider = todo.pop(0)
        if not isinstance(provider, Mapping):
            continue
        yield where, provider
        fallbacks = provider.get("fallbacks")
        if isinstance(fallbacks, list):
            todo += [(f"{where}.fallbacks.{i}", fb) for i, fb in enumerate(fallbacks)]


def check_inline_scripts(spec: SessionSpec) -> None:
    """Refuse a provider ``script`` that is a string (422), before anything reads it.

    The request models already refuse one; this is the rule itself, for any
    spec built from a request.

    Raises:
        HTTPException: 422 naming the field, e.g. ``job.provider.script``.
    """
    for where, provider in provider_mappings(spec):
        script = provider.get("script")
        if script is not None and (isinstance(script, str) or reads_a_file(script)):
            raise HTTPException(
                422,
                f"{where}.script: a provider script must be inline JSON over the API "
                "(a mapping with turns, or a list of turns), not a file path or text",
            )


#: Tools a script may call besides the registered ones: the runtime adds them
#: (a contract's ``output_schema``, a prompt stored as an artifact).
RUNTIME_TOOLS = frozenset({"StructuredOutput", "ReadPromptArtifact"})


def check_tool_names(job: JobIn, registered: frozenset[str]) -> None:
    """Refuse a tool name that is not registered on this server (422), wherever a job names one.

    In ``tools`` (the job's, each agent's) and in every scripted turn's calls
    (in the job's provider, each fallback, each agent's, the verifier's): the
    schema lists these names, so a name outside them is refused like any
    value outside the schema.

    Raises:
        HTTPException: 422 naming the field, e.g. ``job.agents.helper.tools.0``.
    """
    named = [("job.tools", job.tools or [])]
    named += [(f"job.agents.{a}.tools", p.tools or []) for a, p in job.agents.items()]
    for where, tools in named:
        for index, name in enumerate(tools):
            if name not in registered:
                raise HTTPException(
                    422,
                    f"{where}.{index}: unknown tool {name[:100]!r}: not registered on this "
                    f"server (registered: {', '.join(sorted(registered))})",
                )
    callable_names = registered | RUNTIME_TOOLS
    for where, name in _script_calls(job):
        if name not in callable_names:
            raise HTTPException(
                422, f"{where}: unknown tool {name[:100]!r}: no script may call it on this server"
            )


def _script_calls(job: JobIn) -> Iterator[tuple[str, str]]:
    """``(field path, tool name)`` of every call in every scripted turn the job holds."""
    todo: list[tuple[str, Any]] = [("job.provider", job.provider)]
    todo += [(f"job.agents.{a}.provider", p.provider) for a, p in job.agents.items()]
    todo.append(("job.verification.provider", job.verification.provider))
    todo += [
        (f"job.verification.next_providers.{i}", p)
        for i, p in enumerate(job.verification.next_providers)
    ]
    while todo:
        where, provider = todo.pop(0)
        if provider is None:
            continue
        todo += [(f"{where}.fallbacks.{i}", f) for i, f in enumerate(provider.fallbacks)]
        script = getattr(provider, "script", None)
        if script is None:
            continue
        if isinstance(script, list):
            runs = [(f"{where}.script", script)]
        else:
            runs = [(f"{where}.script.turns", script.turns)]
            runs += [(f"{where}.script.next_runs.{r}", t) for r, t in enumerate(script.next_runs)]
        for path, turns in runs:
            for t, turn in enumerate(turns):
                for c, call in enumerate(turn.tool_calls):
                    yield f"{path}.{t}.tool_calls.{c}.name", call.name


def strict(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency that parses the body as ``model`` in pydantic's strict mode.

    FastAPI validates a body in lax mode, where ``0`` is ``false`` and
    ``"5"`` is ``5``; the schema says neither, so the route uses this parse
    (JSON input: strings still name enum members).  JSON Schema's integers
    include ``5.0`` (the same number), so an integral float is read as an
    integer first; a number that is not finite (``NaN``, ``1e400``) is refused.

    Raises:
        RequestValidationError: the body is not ``model`` exactly (422).
    """

    async def parse(request: Request) -> M:
        json_body(request)
        raw = await request.body()
        if not raw.strip():  # FastAPI's own parse reports malformed JSON (400) first
            missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
            raise RequestValidationError([missing])
        try:
            data = _integral(json.loads(raw, parse_constant=_not_finite))
            return model.model_validate_json(json.dumps(data), strict=True)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
            raise RequestValidationError(errors) from None
        except _NotFinite:
            raise HTTPException(422, "body: numbers must be finite") from None

    return parse


class _NotFinite(ValueError):
    """A JSON number the schema cannot mean: NaN or an infinity."""


def _not_finite(token: str) -> Any:
    raise _NotFinite(token)


def _integral(value: Any) -> Any:
    """``value`` with every integral float an int (``5.0`` -> ``5``); non-finite refused."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotFinite(repr(value))
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


def json_body(request: Request) -> None:
    """A body must be ``application/json`` (or ``+json``), else 415 (part of :func:`strict`).

    Raises:
        HTTPException: 415 naming the media type sent.
    """
    sent = request.headers.get("content-type", "")
    media = sent.split(";", 1)[0].strip().lower()
    length = request.headers.get("content-length")
    has_body = length not in (None, "0") or "transfer-encoding" in request.headers
    if has_body and not (media == "application/json" or media.endswith("+json")):
        raise HTTPException(
            415, f"the body must be application/json, not {media[:100] or 'untyped'}"
        )


def allowed_workspace(workspace: str, roots: Sequence[Path]) -> Path:
    """``workspace`` resolved, if it is an absolute directory inside ``roots`` (any, if empty).

    Raises:
        HTTPException: 422 when it is not an absolute path (or holds a NUL);
            403 when it is outside the roots -- the same whether or not the
            path exists; 404 when no directory is there.
    """
    shown = repr(workspace[:300])
    path = Path(workspace)
    if "\x00" in workspace or not path.is_absolute():
        raise HTTPException(422, f"workspace: {shown} is not an absolute path")
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long
        raise HTTPException(404, f"workspace: no directory at {shown}") from None
    if roots and not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise HTTPException(
            403, f"workspace: {shown} is not inside NAHIDA_API_WORKSPACE_ROOTS ({allowed})"
        )
    if not resolved.is_dir():
        raise HTTPException(404, f"workspace: no directory at {shown}")
    return resolved


def _declared(dependant: Dependant) -> set[str]:
    """Every query parameter name ``dependant`` and its sub-dependencies read."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


def known_query_only(request: Request) -> None:
    """Router dependency: refuse a query parameter the matched route does not declare.

    Raises:
        HTTPException: 422 naming the first unknown parameter and the known ones.
    """
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _declared(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        accepted = ", ".join(sorted(known)) or "none"
        raise HTTPException(
            422, f"query.{unknown[0][:64]}: unknown query parameter (accepted: {accepted})"
        )
