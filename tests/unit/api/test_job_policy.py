"""The API job policy (nahida_workers/api/policy.py): what a posted job may make a worker do."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException

from nahida_workers.api.policy import check_job_policy
from nahida_workers.providers.config import DEFAULT_API_KEY_ENV, DEFAULT_BASE_URLS
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.settings import Settings

SCRIPTED = {"kind": "scripted", "script": {"turns": [{"text": "hi"}]}}
OPENAI = {"kind": "openai", "model": "m"}


def _spec(**fields: Any) -> SessionSpec:
    return SessionSpec.model_validate({"prompt": "p", "provider": SCRIPTED, **fields})


def _refused(spec: SessionSpec, settings: Settings | None = None) -> str:
    with pytest.raises(HTTPException) as caught:
        check_job_policy(spec, settings or Settings())
    assert caught.value.status_code == 422
    return str(caught.value.detail)


def test_the_defaults_are_the_adapters_own_key_variable_and_roots() -> None:
    _hooks, key_envs, base_urls = Settings().api_job_policy
    assert key_envs == {DEFAULT_API_KEY_ENV}
    assert base_urls == set(DEFAULT_BASE_URLS.values())
    # An HTTP provider that names neither, or names the defaults, passes.
    check_job_policy(_spec(provider=OPENAI), Settings())
    check_job_policy(_spec(provider={**OPENAI, "kind": "anthropic"}), Settings())
    named = {**OPENAI, "base_url": "https://api.openai.com/v1/", "api_key_env": DEFAULT_API_KEY_ENV}
    check_job_policy(_spec(provider=named), Settings())
    check_job_policy(_spec(), Settings())  # scripted: reaches nothing


def test_stop_hooks_are_refused_unless_listed() -> None:
    spec = _spec(stop_hooks=["os:system"])
    message = _refused(spec)
    assert message.startswith("job.stop_hooks.0:") and "NAHIDA_API_ALLOWED_STOP_HOOKS" in message
    allowed = Settings(api_allowed_stop_hooks="mypkg.hooks:check, other:x")
    check_job_policy(_spec(stop_hooks=["mypkg.hooks:check"]), allowed)
    second = _refused(_spec(stop_hooks=["mypkg.hooks:check", "os:system"]), allowed)
    assert second.startswith("job.stop_hooks.1:")


@pytest.mark.parametrize(
    ("field", "provider"),
    [
        ("job.provider.api_key_env", {**OPENAI, "api_key_env": "NAHIDA_DATABASE_URL"}),
        ("job.provider.base_url", {**OPENAI, "base_url": "https://attacker.example/v1"}),
        ("job.provider.base_url", {**OPENAI, "base_url": "https://api.openai.com/v1@evil.example"}),
        # unused by a scripted provider, still not a thing to name over the API
        ("job.provider.api_key_env", {**SCRIPTED, "api_key_env": "AWS_SECRET_ACCESS_KEY"}),
        ("job.provider.api_key_env", {**OPENAI, "api_key_env": ["NAHIDA_PROVIDER_API_KEY"]}),
        (
            "job.provider.fallbacks.1.base_url",
            {**SCRIPTED, "fallbacks": [OPENAI, {**OPENAI, "base_url": "http://10.0.0.1:8/v1"}]},
        ),
        (
            "job.provider.fallbacks.0.fallbacks.0.api_key_env",
            {
                **SCRIPTED,
                "fallbacks": [{**SCRIPTED, "fallbacks": [{**OPENAI, "api_key_env": "HOME"}]}],
            },
        ),
    ],
)
def test_a_provider_may_name_only_allowed_key_variables_and_base_urls(
    field: str, provider: dict[str, Any]
) -> None:
    message = _refused(_spec(provider=provider))
    assert message.startswith(f"{field}:"), message
    setting = "KEY_ENVS" if field.endswith("api_key_env") else "BASE_URLS"
    assert f"NAHIDA_API_ALLOWED_{setting}" in message


def test_agents_profiles_are_checked_alike() -> None:
    agents = {"helper": {"provider": {**OPENAI, "base_url": "https://attacker.example"}}}
    message = _refused(_spec(tools=["Read", "Task"], agents=agents))
    assert message.startswith("job.agents.helper.provider.base_url:")


def test_the_operator_widens_or_narrows_the_lists() -> None:
    local = {**OPENAI, "base_url": "http://127.0.0.1:8000/v1", "api_key_env": "LOCAL_LLM_KEY"}
    widened = Settings(
        api_allowed_key_envs="NAHIDA_PROVIDER_API_KEY,LOCAL_LLM_KEY",
        api_allowed_base_urls="http://127.0.0.1:8000/v1/",
    )
    check_job_policy(_spec(provider=local), widened)
    # Only the local server listed: a provider without base_url would reach
    # api.openai.com with the key, so it is refused too.
    assert _refused(_spec(provider=OPENAI), widened).startswith("job.provider.base_url:")
    none = Settings(api_allowed_key_envs="", api_allowed_base_urls="http://127.0.0.1:8000/v1")
    assert _refused(_spec(provider=local), none).startswith("job.provider.api_key_env:")


def test_network_is_refused_unless_the_server_allows_it() -> None:
    for spec, field in (
        (_spec(network=True), "job.network:"),
        (_spec(tools=["Task"], agents={"net": {"provider": SCRIPTED, "network": True}}),
         "job.agents.net.network:"),
    ):  # fmt: skip
        message = _refused(spec)
        assert message.startswith(field) and "NAHIDA_API_ALLOW_NETWORK" in message
        check_job_policy(spec, Settings(api_allow_network=True))
    check_job_policy(_spec(network=False), Settings())
