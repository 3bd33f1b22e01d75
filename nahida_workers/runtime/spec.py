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

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.core.events import CompletionContract
from nahida_workers.core.messages import ToolChoice
from nahida_workers.errors import ConfigError

__all__ = ["DEFAULT_TOOLS", "JobSpec", "Limits", "SessionSpec", "load_job"]

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
    """

    max_steps: int = Field(50, ge=1)
    wall_clock_budget_s: float = Field(3600.0, gt=0)
    max_output_tokens: int | None = Field(None, ge=1)
    context_budget_tokens: int | None = Field(120_000, ge=1000)
    tool_output_max_bytes: int = Field(64 * 1024, ge=1024)
    bash_timeout_s: float = Field(120.0, gt=0)


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
    """

    prompt: str
    system_prompt: str | None = None
    provider: dict[str, Any] = Field(default_factory=lambda: {"kind": "scripted"})
    tools: tuple[str, ...] = DEFAULT_TOOLS
    placement: dict[str, str] = Field(default_factory=dict)
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits = Field(default_factory=Limits)


class JobSpec(SessionSpec):
    """A job file: a named session spec applied to many workspaces."""

    name: str
    description: str = ""

    def session_spec(self) -> SessionSpec:
        """The per-session part of the job."""
        data = self.model_dump(exclude={"name", "description"})
        return SessionSpec.model_validate(data)


def load_job(path: str | Path) -> JobSpec:
    """Load and validate a job file (YAML or JSON).

    A ``provider.script`` given as a relative path is read relative to the job
    file and inlined, so the session snapshot does not depend on the file.

    Raises:
        ConfigError: the file is missing or invalid (message names the field).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read job file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"job file {path} must be a mapping")
    provider = data.get("provider")
    if isinstance(provider, dict) and isinstance(provider.get("script"), str):
        script_path = (path.parent / provider["script"]).resolve()
        try:
            provider["script"] = yaml.safe_load(script_path.read_text("utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read provider script {script_path}: {exc}") from None
    data.setdefault("name", path.stem)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid job file {path}:\n{exc}") from None
