"""Build a :class:`~nahida_workers.ports.Provider` from a :class:`ProviderConfig`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from nahida_workers import worker_secrets
from nahida_workers.ports import Provider
from nahida_workers.providers.anthropic import AnthropicProvider
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.fallback import FallbackProvider
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.providers.scripted import ScriptedProvider, load_script

__all__ = ["FallbackProvider", "build_provider"]


def build_provider(
    config: ProviderConfig,
    *,
    env: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_fallback: Callable[[str, str], None] | None = None,
) -> Provider:
    """Build the provider a config describes (with its fallbacks, if any).

    Args:
        config: the provider config.
        env: where ``api_key_env`` is looked up (default: the secrets the worker
            holds in memory, then ``os.environ``; read now).
        client: an ``httpx.Client`` shared by the HTTP providers (tests).
        sleep: retry / script delay sleeper (seconds; tests pass a fake).
        on_fallback: passed to :class:`FallbackProvider` when there are fallbacks.

    Raises:
        ConfigError: the script of a scripted provider is missing or malformed.
    """
    primary = _build_one(config, env=env, client=client, sleep=sleep)
    if not config.fallbacks:
        return primary
    rest = [
        build_provider(fb, env=env, client=client, sleep=sleep, on_fallback=on_fallback)
        for fb in config.fallbacks
    ]
    return FallbackProvider([primary, *rest], on_fallback=on_fallback)


def _build_one(
    config: ProviderConfig,
    *,
    env: Mapping[str, str] | None,
    client: httpx.Client | None,
    sleep: Callable[[float], None],
) -> Provider:
    if config.kind == "scripted":
        source: Any = config.script
        if isinstance(source, list):
            source = {"turns": source}
        return ScriptedProvider(
            load_script(source),
            name=config.name or "scripted",
            model=config.model or "scripted",
            sleep=sleep,
        )
    # A worker keeps its keys in memory, not in its environment (nahida_workers/worker_secrets.py).
    if env is not None:
        api_key = env.get(config.api_key_env) or None
    else:
        api_key = worker_secrets.lookup(config.api_key_env) or None
    cls = OpenAICompatProvider if config.kind == "openai" else AnthropicProvider
    return cls(
        base_url=config.resolved_base_url,
        model=config.model or "",
        api_key=api_key,
        timeout_s=config.timeout_s,
        tool_choice=config.tool_choice,
        supports_tools=config.supports_tools,
        named_tool_choice=config.named_tool_choice,
        max_output_tokens=config.max_output_tokens,
        client=client,
        max_retries=config.max_retries,
        sleep=sleep,
        name=config.name,
    )
