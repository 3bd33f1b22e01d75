"""A job is checked before anything runs, at every entry point: a usage error, not a failed run.

``nahida batch``, ``nahida schedule add/apply`` and ``POST /v1/sessions``
all build the job's tools and provider once and check what a scripted
provider's turns call: a tool the job does not offer (a typo like ``Glb``)
or a ``Task`` agent it does not define is the same usage error as an unknown
tool in the tools list, raised before any session exists.
"""

from __future__ import annotations

from nahida_workers.core.children import TASK_TOOL
from nahida_workers.errors import ConfigError
from nahida_workers.providers.scripted import unknown_script_agents, unknown_script_tools
from nahida_workers.runtime.artifacts import PROMPT_ARTIFACT_TOOL, needs_artifact
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.wiring import provider_for, registry_for
from nahida_workers.settings import Settings

__all__ = ["check_spec"]


def check_spec(spec: SessionSpec, settings: Settings) -> None:
    """Build the provider and the tools once; check every script against what is offered.

    Each ``agents`` profile (a ``Task`` child's spec) is checked alike.

    Raises:
        ConfigError: an unknown tool, an invalid provider, a script calling a
            tool that is not offered or starting an agent that is not defined.
    """
    _check_one(spec, settings, "the scripted provider")
    for name in sorted(spec.agents):
        _check_one(spec.child_spec(name, "-"), settings, f"agent {name!r}'s scripted provider")


def _check_one(spec: SessionSpec, settings: Settings, who: str) -> None:
    """:func:`check_spec` for one spec: tools, provider, and what its script calls."""
    tools = tuple(t for t in spec.tools if t != TASK_TOOL)  # the runtime runs Task itself
    if TASK_TOOL in spec.tools and not spec.agents:
        raise ConfigError("the job offers Task but names no agents: add an 'agents:' mapping")
    registry = registry_for(spec.model_copy(update={"tools": tools}), settings)
    close = getattr(provider_for(spec), "close", None)
    if callable(close):
        close()
    offered = set(registry.names()) | ({TASK_TOOL} & set(spec.tools))
    if needs_artifact(spec.prompt, settings.inline_prompt_max_bytes):
        offered.add(PROMPT_ARTIFACT_TOOL)  # the runtime offers it for a stored prompt
    unknown = unknown_script_tools(spec.provider, offered)
    if unknown:
        raise ConfigError(
            f"{who} calls tools the job does not offer: {unknown}; offered: {sorted(offered)}"
        )
    agents = unknown_script_agents(spec.provider, set(spec.agents))
    if agents:
        raise ConfigError(
            f"{who} starts Task agents the job does not define: {agents}; "
            f"defined: {sorted(spec.agents)}"
        )
