"""What a request may name on the server: inline provider scripts, allowed workspaces.

A job file on the command line may name a provider script by path (the
operator's own files).  Over the API the same string would make the server
read a file a token holder chose -- and its error would tell whether the file
exists -- so a job posted to ``/v1/sessions`` must carry its scripts inline
(a mapping, a list of turns or YAML text), in its provider, each fallback and
each ``agents`` profile.  A workspace must be an existing absolute directory
and, when ``NAHIDA_API_WORKSPACE_ROOTS`` is set, inside one of those roots
(after symlinks are resolved); a refusal reads the same whether or not the
path exists.  A query parameter a route does not declare is a 422, not
silently ignored (``/v1/batches?limt=5`` would otherwise list everything).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant

from nahida_workers.providers.scripted import reads_a_file
from nahida_workers.runtime.spec import SessionSpec

__all__ = ["allowed_workspace", "check_inline_scripts", "known_query_only"]


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
    """Refuse a provider ``script`` that names a file (422), before anything reads it.

    Raises:
        HTTPException: 422 naming the field, e.g. ``job.provider.script``.
    """
    for where, provider in provider_mappings(spec):
        script = provider.get("script")
        if script is not None and reads_a_file(script):
            raise HTTPException(
                422,
                f"{where}.script: a provider script must be inline over the API "
                "(a mapping, a list of turns or YAML text), not a file path on the server",
            )


def allowed_workspace(workspace: str, roots: Sequence[Path]) -> Path:
    """``workspace`` resolved, if it is an absolute directory inside ``roots`` (any, if empty).

    Raises:
        HTTPException: 422 naming ``workspace``; outside the roots the message
            is the same whether or not the path exists.
    """
    path = Path(workspace)
    if not path.is_absolute():
        raise HTTPException(422, f"workspace: {workspace!r} is not an absolute directory path")
    resolved = path.resolve()
    if roots and not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise HTTPException(
            422, f"workspace: {workspace!r} is not inside NAHIDA_API_WORKSPACE_ROOTS ({allowed})"
        )
    if not resolved.is_dir():
        raise HTTPException(422, f"workspace: {workspace!r} is not an absolute directory path")
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
