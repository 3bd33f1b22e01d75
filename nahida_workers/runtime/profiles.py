"""Run limits and agent profiles: the parts of a spec a child agent is made of.

A job's ``limits`` bound one run (DESIGN.md section 6); an :class:`AgentProfile`
is what a ``Task`` child (or a team member) is started with (section 8).
Built-in profiles (``runtime/agents/builtin.py``) and profiles discovered from
files (``runtime/agents/discover.py``) are this same value.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nahida_workers.core.events import CompletionContract
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.tool_profiles import ToolProfile

__all__ = [
    "DEFAULT_TOOLS",
    "PROFILE_TOOLS",
    "AgentProfile",
    "Limits",
    "ParentClose",
    "ToolProfile",
    "profile_default_tools",
]

#: Tools a job gets when it names none.
DEFAULT_TOOLS = ("Read", "Glob", "Grep", "LS", "Bash", "Write", "Edit")
#: Tools a job with a ``tool_profile`` and no ``tools:`` gets (``core/tool_profiles.py``).
#: A deliverer's deliver tools are plugins: the job names them.
PROFILE_TOOLS: dict[ToolProfile, tuple[str, ...]] = {
    ToolProfile.REVIEWER: ("Read", "Glob", "Grep", "LS"),
    ToolProfile.EDITOR: DEFAULT_TOOLS,
    ToolProfile.DELIVERER: DEFAULT_TOOLS,
}


def profile_default_tools(data: Any) -> Any:
    """A spec's or profile's input with ``tools`` filled from its ``tool_profile`` if unset.

    Used as a ``mode="before"`` validator: only a mapping that names a
    profile and no ``tools`` key changes.
    """
    if isinstance(data, dict) and data.get("tool_profile") is not None and "tools" not in data:
        try:
            profile = ToolProfile(data["tool_profile"])
        except ValueError:
            return data  # the field's own validation reports it
        return {**data, "tools": PROFILE_TOOLS[profile]}
    return data


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Spec):
    """Bounds of one run (DESIGN.md section 6).

    Attributes:
        max_steps: provider turns before ``incomplete/max_steps``.
        wall_clock_budget_s: seconds of run time before ``incomplete/budget_exhausted``.
        max_output_tokens: cap per provider reply, in tokens.
        context_budget_tokens: the transcript sent to the provider is compacted
            to about this many tokens (None: never compact).
        tool_output_max_bytes: cap on one tool result the model sees, in bytes.
        bash_timeout_s: default Bash timeout, in seconds.
        token_budget: provider-reported tokens (input + output) before
            ``incomplete/budget_exhausted``.
        repeated_text_at / action_prompt_at / action_stop_at /
        tool_failure_hint_at / truncation_recoveries: the loop bounds of
            DESIGN.md section 6 (see ``core/bounds.py``).
        *_corrections / stop_hook_continuations: how many extra turns each
            completion stage may ask for (see ``core/policy``):
            ``delegation_corrections`` (the delegation contract),
            ``independent_corrections`` (verifier FAILs the independent
            verification gate feeds back), ``goal_corrections`` (a goal never
            claimed, or a verifier's rejection, fed back).
        stop_hook_timeout_s: seconds a stop hook may take before it counts as
            "allow".
        self_check_every: a short runtime self-check prompt before every
            N-th provider turn (``core/self_check.py``; 0: never).
    """

    max_steps: int = Field(50, ge=1)
    wall_clock_budget_s: float = Field(3600.0, gt=0)
    max_output_tokens: int | None = Field(None, ge=1)
    context_budget_tokens: int | None = Field(120_000, ge=1000)
    tool_output_max_bytes: int = Field(64 * 1024, ge=1024)
    bash_timeout_s: float = Field(120.0, gt=0)
    token_budget: int | None = Field(None, ge=1)
    repeated_text_at: int = Field(3, ge=2)
    action_prompt_at: int = Field(8, ge=2)
    action_stop_at: int = Field(16, ge=2)
    tool_failure_hint_at: int = Field(3, ge=1)
    truncation_recoveries: int = Field(3, ge=0)
    evidence_corrections: int = Field(1, ge=0)
    intent_corrections: int = Field(2, ge=0)
    structured_corrections: int = Field(2, ge=0)
    verification_corrections: int = Field(1, ge=0)
    stop_hook_continuations: int = Field(3, ge=0)
    delegation_corrections: int = Field(1, ge=0)
    independent_corrections: int = Field(1, ge=0)
    goal_corrections: int = Field(2, ge=0)
    stop_hook_timeout_s: float = Field(10.0, gt=0)
    self_check_every: int = Field(5, ge=0)


class ParentClose(StrEnum):
    """What happens to a child still running when its parent ends (Temporal's ParentClosePolicy).

    ``cancel``: the parent's seal requests the child's cancel (and re-dispatches
    it so a parked child can seal ``cancelled``); ``abandon``: the child keeps
    running.  DESIGN.md section 8.
    """

    CANCEL = "cancel"
    ABANDON = "abandon"


class AgentProfile(_Spec):
    """A child agent a job's ``Task`` tool may start (DESIGN.md section 8).

    A child's config snapshot is this profile plus the Task call's prompt
    (``SessionSpec.child_spec``).  ``provider``, ``tools`` and ``limits``
    set to ``null`` are the parent's own (the built-in ``general`` agent).

    Attributes:
        description: what the agent is for (shown in the Task tool's schema).
        system_prompt / provider / tools / tool_choice / contract / limits:
            as in ``SessionSpec``, for the child.
        parent_close: what the parent's end does to this child if it still
            runs (:class:`ParentClose`; default ``cancel``).
        network: the child's commands may use the network (default: none;
            docs/security.md).
        tool_profile: the child's risk ceiling (``core/tool_profiles.py``);
            with no ``tools`` it also picks the child's tools.
    """

    description: str = ""
    system_prompt: str | None = None
    provider: dict[str, Any] | None = Field(default_factory=lambda: {"kind": "scripted"})
    tools: tuple[str, ...] | None = DEFAULT_TOOLS
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits | None = Field(default_factory=Limits)
    parent_close: ParentClose = ParentClose.CANCEL
    network: bool = False
    tool_profile: ToolProfile | None = None

    _profile_tools = model_validator(mode="before")(profile_default_tools)
