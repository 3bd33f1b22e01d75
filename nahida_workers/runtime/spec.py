"""Job and session specs: what a user asks for, validated with pydantic.

A *job* file (``config/jobs/*.yaml``) names a prompt, a provider, the tools,
the completion contract and the limits.  ``nahida batch`` turns it into one
:class:`SessionSpec` per workspace; the spec is snapshotted into
``sessions.config_json`` at dispatch, so editing the job file later never
changes a session already queued or running.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.constants import DEFAULT_PRIORITY, MAX_PRIORITY
from nahida_workers.core.bounds import BoundLimits
from nahida_workers.core.events import CompletionContract
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy import PolicyLimits
from nahida_workers.errors import ConfigError
from nahida_workers.runtime.observe.channel import ChannelPolicy
from nahida_workers.yaml_input import read_yaml_file

__all__ = [
    "DEFAULT_TOOLS",
    "AgentProfile",
    "JobSpec",
    "Limits",
    "ParentClose",
    "SessionSpec",
    "bound_limits",
    "load_job",
    "policy_limits",
    "validation_summary",
]

#: Tools a job gets when it names none.
DEFAULT_TOOLS = ("Read", "Glob", "Grep", "LS", "Bash", "Write", "Edit")


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
            completion stage may ask for (see ``core/policy``).
        stop_hook_timeout_s: seconds a stop hook may take before it counts as
            "allow".
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
    stop_hook_timeout_s: float = Field(10.0, gt=0)


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
    (:meth:`SessionSpec.child_spec`).

    Attributes:
        system_prompt / provider / tools / tool_choice / contract / limits:
            as in :class:`SessionSpec`, for the child.
        parent_close: what the parent's end does to this child if it still
            runs (:class:`ParentClose`; default ``cancel``).
    """

    system_prompt: str | None = None
    provider: dict[str, Any] = Field(default_factory=lambda: {"kind": "scripted"})
    tools: tuple[str, ...] = DEFAULT_TOOLS
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits = Field(default_factory=Limits)
    parent_close: ParentClose = ParentClose.CANCEL


class SessionSpec(_Spec):
    """Everything a worker needs to run one session, independent of any file.

    Attributes:
        prompt: the first user input.
        system_prompt: sent with every provider call.
        provider: provider config mapping (``kind`` scripted/openai/anthropic,
            ``model``, ``script`` for scripted, ``base_url`` ...).
        tools: tool names offered to the model.
        placement: per-tool placement override (``local`` / ``remote``).
        tool_choice: auto / required / none.
        contract: the completion contract.
        limits: run bounds.
        stop_hooks: ``module:function`` paths of stop hooks (see
            ``runtime/ownership/hooks.py``).
        channel: which user-visible events watchers see (``runtime/observe/channel.py``).
        agents: profiles the ``Task`` tool may start, by name (DESIGN.md section 8).
        parent_close: for a child session, what its parent's end does to it
            (copied from its profile; ignored for a top-level session).
    """

    prompt: str
    system_prompt: str | None = None
    provider: dict[str, Any] = Field(default_factory=lambda: {"kind": "scripted"})
    tools: tuple[str, ...] = DEFAULT_TOOLS
    placement: dict[str, str] = Field(default_factory=dict)
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits = Field(default_factory=Limits)
    stop_hooks: tuple[str, ...] = ()
    channel: ChannelPolicy = ChannelPolicy.FINAL_ONLY
    agents: dict[str, AgentProfile] = Field(default_factory=dict)
    parent_close: ParentClose = ParentClose.CANCEL

    def labels(self) -> tuple[str, str]:
        """``(provider name, model)`` recorded on every run of the session.

        The model falls back to the provider's name (a scripted provider has
        no model), the same for a session's first run, a later run started by
        steering and a child's run, so the ``{provider, model}`` metric labels
        of one session never split.
        """
        provider = str(self.provider.get("name") or self.provider.get("kind", "scripted"))
        return provider, str(self.provider.get("model") or provider)

    def child_spec(self, agent: str, prompt: str) -> SessionSpec:
        """The config snapshot of a child started with ``agent``'s profile on ``prompt``.

        The child inherits the profiles, so it may start children of its own
        (the depth limit bounds the tree).

        Raises:
            KeyError: no such profile.
        """
        profile = self.agents[agent]
        return SessionSpec(
            prompt=prompt,
            system_prompt=profile.system_prompt,
            provider=profile.provider,
            tools=profile.tools,
            tool_choice=profile.tool_choice,
            contract=profile.contract,
            limits=profile.limits,
            channel=self.channel,
            agents=self.agents,
            parent_close=profile.parent_close,
        )


class JobSpec(SessionSpec):
    """A job file: a named session spec applied to many workspaces.

    Attributes:
        name: the job's label in reports and listings (:func:`load_job` names a
            job file without one after its file).
        description: what the job does, in a line (a label, like ``name``).
        priority: 0-9, 9 most urgent: the broker hands out a more urgent
            job's sessions first, whatever was queued before them
            (DESIGN.md section 1).
        max_running: at most this many sessions of one batch of the job (of
            all fires of a schedule) run at once; None: the fleet's default
            (``NAHIDA_MAX_RUNNING_DEFAULT``); 0: no cap.
    """

    name: str
    description: str = ""
    priority: int = Field(DEFAULT_PRIORITY, ge=0, le=MAX_PRIORITY)
    max_running: int | None = Field(None, ge=0)

    def session_spec(self) -> SessionSpec:
        """The per-session part of the job."""
        data = self.model_dump(exclude={"name", "description", "priority", "max_running"})
        return SessionSpec.model_validate(data)

    def cap(self, default: int) -> int | None:
        """The job's concurrency cap: ``max_running``, else ``default``; None when uncapped."""
        cap = default if self.max_running is None else self.max_running
        return cap or None


def load_job(path: str | Path) -> JobSpec:
    """Load and validate a job file (YAML or JSON).

    A ``provider.script`` given as a relative path is read relative to the job
    file and inlined, so the session snapshot does not depend on the file.

    Raises:
        ConfigError: the file is missing or invalid (message names the field).
    """
    path = Path(path)
    data = read_yaml_file(path, what="job file")
    if not isinstance(data, dict):
        raise ConfigError(f"job file {path} must be a mapping")
    provider = data.get("provider")
    if isinstance(provider, dict) and isinstance(provider.get("script"), str):
        script_path = (path.parent / provider["script"]).resolve()
        provider["script"] = read_yaml_file(script_path, what="provider script")
    data.setdefault("name", path.stem)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid job file {path}: {validation_summary(exc)}") from None


def validation_summary(exc: ValidationError, *, limit: int = 3) -> str:
    """A pydantic error as one line: ``field.path: message`` for the first ``limit`` errors."""
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "(document)"
        parts.append(f"{where}: {error.get('msg')}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def policy_limits(limits: Limits) -> PolicyLimits:
    """The completion pipeline's correction bounds of a job's limits."""
    return PolicyLimits(
        evidence_corrections=limits.evidence_corrections,
        intent_corrections=limits.intent_corrections,
        structured_corrections=limits.structured_corrections,
        verification_corrections=limits.verification_corrections,
        stop_hook_continuations=limits.stop_hook_continuations,
    )


def bound_limits(limits: Limits) -> BoundLimits:
    """The loop bounds of a job's limits."""
    return BoundLimits(
        repeated_text_at=limits.repeated_text_at,
        action_prompt_at=limits.action_prompt_at,
        action_stop_at=limits.action_stop_at,
        tool_failure_hint_at=limits.tool_failure_hint_at,
        truncation_recoveries=limits.truncation_recoveries,
        token_budget=limits.token_budget,
    )
