"""Job and session specs: what a user asks for, validated with pydantic.

A *job* file (``config/jobs/*.yaml``) names a prompt, a provider, the tools,
the completion contract and the limits.  ``nahida batch`` turns it into one
:class:`SessionSpec` per workspace; the spec is snapshotted into
``sessions.config_json`` at dispatch, so editing the job file later never
changes a session already queued or running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nahida_workers.constants import DEFAULT_PRIORITY, MAX_PRIORITY
from nahida_workers.core.bounds import BoundLimits
from nahida_workers.core.children import TASK_TOOL, TaskIsolation
from nahida_workers.core.context import DEFAULT_INSTRUCTION_FILES
from nahida_workers.core.events import CompletionContract
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy import PolicyLimits
from nahida_workers.core.policy.delegation import DelegationContract, DelegationMode
from nahida_workers.core.policy.goals import GOAL_TOOL
from nahida_workers.core.policy.verification import (
    DEFAULT_HIGH_RISK,
    DEFAULT_NOT_IMPLEMENTATION,
    GatePolicy,
)
from nahida_workers.errors import ConfigError
from nahida_workers.runtime.agents.builtin import (
    RESERVED_AGENTS,
    builtin_profiles,
    verifier_profile,
)
from nahida_workers.runtime.observe.channel import ChannelPolicy
from nahida_workers.runtime.profiles import (
    DEFAULT_TOOLS,
    AgentProfile,
    Limits,
    ParentClose,
    ToolProfile,
    profile_default_tools,
)
from nahida_workers.yaml_input import read_yaml_file

__all__ = [
    "DEFAULT_TOOLS",
    "AgentProfile",
    "DelegationSpec",
    "JobSpec",
    "Limits",
    "MemorySpec",
    "ParentClose",
    "SessionSpec",
    "VerificationSpec",
    "bound_limits",
    "load_job",
    "policy_limits",
    "validation_summary",
]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DelegationSpec(_Spec):
    """A job's delegation contract (``core/policy/delegation.py``, DESIGN.md section 6).

    Attributes:
        mode: ``free`` (default), ``require`` or ``forbid``.
        areas: with ``require``: exactly one Task call per area (the call's
            ``area`` argument).
        worktree_only: with ``require``: changes only in worktree children.
    """

    mode: DelegationMode = DelegationMode.FREE
    areas: tuple[str, ...] = ()
    worktree_only: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> DelegationSpec:
        if (self.areas or self.worktree_only) and self.mode is not DelegationMode.REQUIRE:
            raise ValueError("areas and worktree_only need mode: require")
        if len(set(self.areas)) != len(self.areas) or not all(a.strip() for a in self.areas):
            raise ValueError("areas must be distinct, non-empty names")
        return self


class VerificationSpec(_Spec):
    """The independent verification gate and the verifier (DESIGN.md section 6).

    Attributes:
        provider: the provider config the reserved verifier runs on (None:
            the job's own provider).
        next_providers: the providers of the session's 2nd, 3rd ...
            verifier (the last one repeats), e.g. a second opinion from
            another model after a FAIL.
        min_files: implementation files changed that trigger the gate.
        high_risk_paths: gitignore-style globs whose change triggers it
            (CI config, migrations, lockfiles, secrets by default).
        not_implementation_paths: changed files that do not count as
            implementation (documentation by default).
    """

    provider: dict[str, Any] | None = None
    next_providers: tuple[dict[str, Any], ...] = ()
    min_files: int = Field(3, ge=1)
    high_risk_paths: tuple[str, ...] = DEFAULT_HIGH_RISK
    not_implementation_paths: tuple[str, ...] = DEFAULT_NOT_IMPLEMENTATION

    def provider_for(self, attempt: int) -> dict[str, Any] | None:
        """The provider of the session's verifier number ``attempt`` (1-based)."""
        if attempt <= 1 or not self.next_providers:
            return self.provider
        return self.next_providers[min(attempt - 2, len(self.next_providers) - 1)]

    def gate(self) -> GatePolicy:
        """The pure gate policy of this spec."""
        return GatePolicy(self.min_files, self.high_risk_paths, self.not_implementation_paths)


class MemorySpec(_Spec):
    """A job's workspace memory (``core/memory.py``, docs/memory.md).

    ``memory: true`` in a job is ``memory: {enabled: true}``.

    Attributes:
        enabled: the session sees the workspace's active memory (after the
            system prompt) and gets the ``Remember`` tool.
        ttl_days: a new item expires this many days after it is written
            (an approval may set another expiry).
        max_items: most items injected into one request (newest verified).
    """

    enabled: bool = False
    ttl_days: float = Field(90.0, gt=0, le=3650)
    max_items: int = Field(20, ge=1, le=200)


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
        stop_hooks: names of stop hooks the operator registered (see
            ``runtime/ownership/hooks.py`` and ``nahida_workers/plugins.py``).
        channel: which user-visible events watchers see (``runtime/observe/channel.py``).
        agents: profiles the ``Task`` tool may start, by name (DESIGN.md
            section 8); the built-in ``general`` and ``explore`` are always
            there unless the job defines those names itself, and ``verifier``
            is reserved (``runtime/agents/builtin.py``).
        parent_close: for a child session, what its parent's end does to it
            (copied from its profile; ignored for a top-level session).
        network: Bash's sandbox keeps the network (``--share-net``); default
            False: no network at all (docs/security.md).
        goal: the session's goal, active from the start: it completes only
            through a verifier's PASS (``core/policy/goals.py``).
        delegation: the delegation contract (:class:`DelegationSpec`).
        verification: the independent verification gate and the verifier's
            provider (:class:`VerificationSpec`).
        trust_workspace: read agent definitions from the workspace's
            ``.nahida/agents/`` at submit time (``runtime/agents/discover.py``),
            and its instruction files into the system prompt at each run's
            start (``core/context.py``).
        instruction_files: the workspace's instruction files (relative
            paths, in order) a trusted workspace contributes to the system
            prompt; default ``AGENTS.md``.
        tool_profile: the session's risk ceiling, ``reviewer``, ``editor`` or
            ``deliverer`` (``core/tool_profiles.py``); with no ``tools`` it
            also picks the tools.
        isolation: ``worktree``: a top-level session runs in its own git
            worktree of its workspace, on ``nahida/<session id>``, like an
            ``isolation: worktree`` child (``runtime/children/worktree.py``);
            ``shared`` (default): in the workspace itself.  A child's
            isolation is its Task call's, never this field.
        memory: the workspace memory (:class:`MemorySpec`); off by default.
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
    agents: dict[str, AgentProfile] = Field(default_factory=dict, validate_default=True)
    parent_close: ParentClose = ParentClose.CANCEL
    network: bool = False
    goal: str | None = None
    delegation: DelegationSpec = Field(default_factory=DelegationSpec)
    verification: VerificationSpec = Field(default_factory=VerificationSpec)
    trust_workspace: bool = False
    instruction_files: tuple[str, ...] = Field(DEFAULT_INSTRUCTION_FILES, max_length=16)
    tool_profile: ToolProfile | None = None

    _profile_tools = model_validator(mode="before")(profile_default_tools)

    @field_validator("instruction_files")
    @classmethod
    def _relative_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry is a relative path inside the workspace (no ``..``, not absolute)."""
        for entry in value:
            parts = Path(entry).parts
            if not entry.strip() or Path(entry).is_absolute() or ".." in parts or "\0" in entry:
                raise ValueError(f"{entry!r} must be a relative path inside the workspace")
        return value

    isolation: TaskIsolation = TaskIsolation.SHARED
    memory: MemorySpec = Field(default_factory=MemorySpec)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_shorthand(cls, value: Any) -> Any:
        """``memory: true`` / ``false`` is ``{enabled: ...}``."""
        return {"enabled": value} if isinstance(value, bool) else value

    @field_validator("agents", mode="before")
    @classmethod
    def _with_builtins(cls, value: Any) -> Any:
        """The built-in agents join the job's own; a reserved name is refused."""
        if not isinstance(value, dict):
            return value  # the field's own validation reports it
        reserved = sorted(RESERVED_AGENTS & set(value))
        if reserved:
            raise ValueError(
                f"agent name {reserved[0]!r} is reserved: the runtime starts it itself"
            )
        return {**builtin_profiles(), **value}

    @model_validator(mode="after")
    def _task_fits_profile(self) -> SessionSpec:
        """A reviewer cannot delegate: ``Task`` starts children that may write."""
        if self.tool_profile is ToolProfile.REVIEWER and TASK_TOOL in self.tools:
            raise ValueError(
                "tool Task is a write tool (its children may change the workspace); "
                "tool_profile reviewer allows read_only tools only"
            )
        return self

    @model_validator(mode="after")
    def _delegation_fits_tools(self) -> SessionSpec:
        mode = self.delegation.mode
        if mode is DelegationMode.FORBID and TASK_TOOL in self.tools:
            raise ValueError("delegation: forbid contradicts offering the Task tool")
        if mode is DelegationMode.REQUIRE and TASK_TOOL not in self.tools:
            raise ValueError("delegation: require needs the Task tool in tools")
        return self

    def may_verify(self) -> bool:
        """Whether a session of this spec may start a verifier (Task offered, or a goal)."""
        return TASK_TOOL in self.tools or self.goal is not None or GOAL_TOOL in self.tools

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
        (the depth limit bounds the tree).  A profile's ``null`` provider,
        tools or limits are this session's own (the built-in ``general``).

        Raises:
            KeyError: no such profile (``verifier`` is never one).
        """
        return self._spec_of(self.agents[agent], prompt)

    def verifier_spec(self, prompt: str, attempt: int = 1) -> SessionSpec:
        """The config snapshot of this session's verifier number ``attempt`` (1-based).

        Read-only tools, the verdict as its required structured output, the
        provider of ``verification`` (the job's own by default).
        """
        profile = verifier_profile(self.verification.provider_for(attempt))
        return self._spec_of(profile, prompt).model_copy(update={"agents": builtin_profiles()})

    def _spec_of(self, profile: AgentProfile, prompt: str) -> SessionSpec:
        return SessionSpec(
            prompt=prompt,
            system_prompt=profile.system_prompt,
            provider=profile.provider if profile.provider is not None else self.provider,
            tools=profile.tools if profile.tools is not None else self.tools,
            tool_choice=profile.tool_choice,
            contract=profile.contract,
            limits=profile.limits if profile.limits is not None else self.limits,
            channel=self.channel,
            agents=self.agents,
            parent_close=profile.parent_close,
            network=profile.network,
            tool_profile=profile.tool_profile,
            # A child works in the same repository: it trusts what its parent trusts.
            trust_workspace=self.trust_workspace,
            instruction_files=self.instruction_files,
        )

    def delegation_contract(self) -> DelegationContract:
        """The pure delegation contract of this spec (read-only agents named)."""
        read_only = frozenset(
            name
            for name in self.agents
            if not (
                {"Write", "Edit", "Bash", TASK_TOOL}
                & set(self._spec_of(self.agents[name], "-").tools)
            )
        )
        return DelegationContract(
            self.delegation.mode,
            self.delegation.areas,
            self.delegation.worktree_only,
            read_only,
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
        delegation_corrections=limits.delegation_corrections,
        independent_corrections=limits.independent_corrections,
        goal_corrections=limits.goal_corrections,
        truncation_recoveries=limits.truncation_recoveries,
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
