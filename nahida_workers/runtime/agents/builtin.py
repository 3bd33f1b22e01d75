"""The built-in agents every job may start by name (DESIGN.md sections 6 and 8).

=============  ==================================================================
agent          what it is
=============  ==================================================================
``general``    the job's own tools, provider and limits, with a general prompt
``explore``    read-only tools (:data:`READ_ONLY_TOOLS`), the job's provider
``verifier``   read-only tools, a required structured PASS/FAIL verdict;
               *reserved*: only the runtime starts it (the independent
               verification gate, goals), a job can neither define it nor
               start it with ``Task``
=============  ==================================================================

``general`` and ``explore`` are ordinary profiles: a job (or a definition
file) that defines one of these names replaces the built-in.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import CompletionContract
from nahida_workers.core.policy.verification import VERDICT_SCHEMA, VERIFIER_AGENT
from nahida_workers.runtime.profiles import AgentProfile, ToolProfile

__all__ = [
    "BUILTIN_AGENTS",
    "READ_ONLY_TOOLS",
    "RESERVED_AGENTS",
    "VERIFIER_PROMPT",
    "builtin_profiles",
    "is_builtin",
    "verifier_profile",
]

#: The tools of ``explore`` and ``verifier``: they read, never write.
READ_ONLY_TOOLS = ("Read", "Glob", "Grep", "LS")
#: Names no job or definition file may use.
RESERVED_AGENTS = frozenset({VERIFIER_AGENT})

GENERAL_PROMPT = (
    "You are a general-purpose agent working on one sub-task for a parent agent. Do the "
    "sub-task with your tools, check your work, and end with a short, factual report of what "
    "you did and found."
)
EXPLORE_PROMPT = (
    "You are a read-only exploration agent. Find and read what the sub-task asks about with "
    "your read-only tools; you cannot change anything. End with a concise report: what you "
    "looked at, what you found, with file paths."
)
VERIFIER_PROMPT = (
    "You are an independent verifier. You did not do the work; judge it. Use your read-only "
    "tools to check the files. Answer only with the StructuredOutput tool: verdict PASS when "
    "the work is complete and correct, FAIL otherwise, and the reasons."
)

_BUILTINS: dict[str, AgentProfile] = {
    "general": AgentProfile(
        description="A general-purpose agent with the job's own tools.",
        system_prompt=GENERAL_PROMPT,
        provider=None,
        tools=None,
        limits=None,
    ),
    "explore": AgentProfile(
        description="A read-only agent that searches and reads the workspace.",
        system_prompt=EXPLORE_PROMPT,
        provider=None,
        tools=READ_ONLY_TOOLS,
        limits=None,
    ),
}
#: The built-in names a job may start with ``Task``.
BUILTIN_AGENTS = tuple(sorted(_BUILTINS))


def builtin_profiles() -> dict[str, AgentProfile]:
    """The built-in profiles (``general``, ``explore``), by name."""
    return dict(_BUILTINS)


def is_builtin(name: str, profile: AgentProfile) -> bool:
    """Whether ``profile`` is the built-in of ``name`` (not a job's own definition)."""
    return _BUILTINS.get(name) == profile


def verifier_profile(provider: dict[str, Any] | None) -> AgentProfile:
    """The reserved verifier: read-only tools, a required verdict; a None provider is the job's."""
    return AgentProfile(
        description="The reserved independent verifier.",
        system_prompt=VERIFIER_PROMPT,
        provider=provider,
        tools=READ_ONLY_TOOLS,
        contract=CompletionContract(output_schema=VERDICT_SCHEMA),
        limits=None,
        tool_profile=ToolProfile.REVIEWER,
    )
