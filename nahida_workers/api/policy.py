"""The API job policy: what a job posted to ``/v1/sessions`` may make a worker do.

A job file on the command line is the operator's own; a job posted over the
API is a token holder's, and some fields reach past the session:

* ``stop_hooks`` (``module:function``) make a worker import a module and
  call a function;
* a provider's ``api_key_env`` names the variable whose value a worker sends
  as the provider key -- any secret it holds (``NAHIDA_DATABASE_URL``, a
  cloud key), even those hidden from Bash;
* a provider's ``base_url`` names where that key is sent.

So over the API a stop hook must be in ``NAHIDA_API_ALLOWED_STOP_HOOKS``
(default: none), an ``api_key_env`` in ``NAHIDA_API_ALLOWED_KEY_ENVS``
(default: the adapters' own ``NAHIDA_PROVIDER_API_KEY``) and a ``base_url``
in ``NAHIDA_API_ALLOWED_BASE_URLS`` (default: the adapters' default roots),
in the job's provider, each fallback and each ``agents`` profile.  An HTTP
provider that names neither is checked with its defaults (the variable and
root it would use).  ``network: true`` (the job's or a profile's) lets Bash
reach every address the worker reaches, so over the API it needs
``NAHIDA_API_ALLOW_NETWORK``.  A refusal is a 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from fastapi import HTTPException

from nahida_workers.api.inputs import provider_mappings
from nahida_workers.constants import DEFAULT_PROVIDER_API_KEY_ENV, DEFAULT_PROVIDER_BASE_URLS
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.settings import Settings

__all__ = ["check_job_policy"]


def check_job_policy(spec: SessionSpec, settings: Settings) -> None:
    """Refuse a stop hook, key variable or base URL the API job policy does not allow.

    Args:
        spec: the posted job's session spec (its ``agents`` profiles included).
        settings: where the three allow-lists come from
            (:attr:`Settings.api_job_policy`).

    Raises:
        HTTPException: 422 whose message starts with the field, e.g.
            ``job.stop_hooks.0``, ``job.provider.fallbacks.1.base_url`` or
            ``job.agents.helper.provider.api_key_env``.
    """
    hooks, key_envs, base_urls = settings.api_job_policy
    _check_network(spec, settings)
    for i, hook in enumerate(spec.stop_hooks):
        if hook not in hooks:
            _refuse(
                f"job.stop_hooks.{i}", "stop hook", hook, "NAHIDA_API_ALLOWED_STOP_HOOKS", hooks
            )
    for where, provider in provider_mappings(spec):
        key_env, base_url = _reach(provider)
        if key_env is not None and (not isinstance(key_env, str) or key_env not in key_envs):
            _refuse(
                f"{where}.api_key_env",
                "key variable",
                key_env,
                "NAHIDA_API_ALLOWED_KEY_ENVS",
                key_envs,
            )
        if base_url is not None and (
            not isinstance(base_url, str) or base_url.rstrip("/") not in base_urls
        ):
            _refuse(
                f"{where}.base_url", "base URL", base_url, "NAHIDA_API_ALLOWED_BASE_URLS", base_urls
            )


def _check_network(spec: SessionSpec, settings: Settings) -> None:
    """Refuse ``network: true`` (the job's, a profile's) unless ``NAHIDA_API_ALLOW_NETWORK``."""
    if settings.api_allow_network:
        return
    wanting = [("job.network", spec.network)] + [
        (f"job.agents.{name}.network", profile.network) for name, profile in spec.agents.items()
    ]
    for field, network in wanting:
        if network:
            raise HTTPException(
                422,
                f"{field}: network access is not allowed over the API "
                "(set NAHIDA_API_ALLOW_NETWORK=true on the server to allow it)",
            )


def _reach(provider: Mapping[str, Any]) -> tuple[object, object]:
    """``(api_key_env, base_url)`` the provider would use; ``None`` = not used, not named.

    A field the job names is always checked; an HTTP kind (``openai``,
    ``anthropic``) that names neither uses its defaults, checked alike.
    """
    kind = provider.get("kind", "scripted")
    http = isinstance(kind, str) and kind in DEFAULT_PROVIDER_BASE_URLS
    key_env = provider.get("api_key_env", DEFAULT_PROVIDER_API_KEY_ENV if http else None)
    base_url = provider.get("base_url") or (DEFAULT_PROVIDER_BASE_URLS[kind] if http else None)
    return key_env, base_url


def _refuse(
    field: str, what: str, value: object, setting: str, allowed: frozenset[str]
) -> NoReturn:
    listed = ", ".join(sorted(allowed)) or "none"
    raise HTTPException(
        422,
        f"{field}: {what} {value!r} is not allowed over the API "
        f"(set {setting} on the server to allow it; allowed: {listed})",
    )
