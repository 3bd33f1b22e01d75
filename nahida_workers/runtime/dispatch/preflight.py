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
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.team import SESSION_BOUND_TOOLS

__all__ = ["check_agent", "check_spec"]


def check_spec(spec: SessionSpec, settings: Settings) -> None:
    """Build the provider and the tools once; check every script against what is offered.

    Each ``agents`` profile (a ``Task`` child's spec, built-ins included) is
    checked alike -- a profile that runs on the job's own provider has its
    script checked once, as the job's -- and so is the reserved verifier of
    a session that may start one (Task offered, or a goal), whose tools must
    all be read-only.

    Raises:
        ConfigError: an unknown tool, an invalid provider, a script calling a
            tool that is not offered or starting an agent that is not defined.
    """
    _check_one(spec, settings, "the scripted provider")
    for name in sorted(spec.agents):
        check_agent(spec, name, settings)
    if not spec.may_verify():
        return
    for attempt in range(1, len(spec.verification.next_providers) + 2):
        verifier = spec.verifier_spec("-", attempt)
        own = spec.verification.provider_for(attempt) is not None
        registry = _check_one(verifier, settings, "the verifier's scripted provider", script=own)
        writers = [n for n in registry.names() if not _read_only(registry, n)]
        if writers:
            raise ConfigError(f"the verifier's tools must be read-only; these write: {writers}")


def check_agent(spec: SessionSpec, name: str, settings: Settings) -> None:
    """:func:`check_spec` for the profile ``name`` of ``spec``: its tools, provider, script.

    Raises:
        ConfigError: as :func:`check_spec`; KeyError: no such profile.
    """
    own = spec.agents[name].provider is not None
    child = spec.child_spec(name, "-")
    _check_one(child, settings, f"agent {name!r}'s scripted provider", script=own)


def _read_only(registry: ToolRegistry, name: str) -> bool:
    tool = registry.get(name)
    return tool is not None and tool.spec.read_only


def _check_one(
    spec: SessionSpec, settings: Settings, who: str, *, script: bool = True
) -> ToolRegistry:
    """:func:`check_spec` for one spec: tools, provider, and what its script calls.

    ``script``: check the provider and what its script calls (False for a
    profile on the job's own provider: that provider is checked as the job's).
    """
    # The runtime runs Task itself and binds the team tools to the session.
    tools = tuple(t for t in spec.tools if t != TASK_TOOL and t not in SESSION_BOUND_TOOLS)
    registry = registry_for(spec.model_copy(update={"tools": tools}), settings)
    if not script:
        return registry
    close = getattr(provider_for(spec), "close", None)
    if callable(close):
        close()
    offered = set(registry.names()) | ({TASK_TOOL, *SESSION_BOUND_TOOLS} & set(spec.tools))
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
    return registry
