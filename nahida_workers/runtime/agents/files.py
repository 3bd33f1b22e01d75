"""One agent definition file: YAML, or Markdown with YAML front matter (DESIGN.md section 8).

A YAML file (``*.yaml`` / ``*.yml``) is a mapping of the fields of
:class:`AgentDefinition`.  A Markdown file (``*.md``) starts with front
matter between two ``---`` lines; the text after it is the agent's system
prompt::

    ---
    description: Reviews the test suite
    tools: [Read, Grep, Glob]
    ---
    You review tests. Report missing cases with file paths.

The agent's name is ``name:``, or the file name without its suffix.  A
definition never names code: its tools are names the tool registry
resolves (``Read``, ``Bash`` ...), never a ``module:Class`` path, and it has
no stop hooks.  ``provider``, ``tools`` and ``limits`` left out are the
job's own.  Any problem is a :class:`~nahida_workers.errors.ConfigError`
(a usage error) that names the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nahida_workers.core.events import CompletionContract
from nahida_workers.core.messages import ToolChoice
from nahida_workers.errors import ConfigError
from nahida_workers.runtime.agents.builtin import RESERVED_AGENTS
from nahida_workers.runtime.profiles import (
    PROFILE_TOOLS,
    AgentProfile,
    Limits,
    ParentClose,
    ToolProfile,
)
from nahida_workers.yaml_input import load_yaml

__all__ = ["DEFINITION_SUFFIXES", "MAX_DEFINITION_BYTES", "AgentDefinition", "read_definition"]

#: The file suffixes read as agent definitions.
DEFINITION_SUFFIXES = frozenset({".yaml", ".yml", ".md"})
#: Largest definition file read, in bytes.
MAX_DEFINITION_BYTES = 64 * 1024
#: An agent name: lower-case letters, digits, ``-`` and ``_``, starting with a letter.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$\n?", re.DOTALL | re.MULTILINE)


class AgentDefinition(BaseModel):
    """The fields of an agent definition file.

    Attributes:
        name: the agent's name (default: the file name without its suffix).
        description: what the agent is for.
        system_prompt: its system prompt (a Markdown file's body).
        provider: its provider config (default: the job's provider).
        tools: registered tool names (default: the job's tools).
        tool_choice / contract / parent_close: as in a job's ``agents:`` profile.
        limits: its run bounds (default: the job's).
        tool_profile: ``reviewer``, ``editor`` or ``deliverer``: a ceiling on
            its tools by risk class, and its tools when ``tools`` is not
            given (docs/concepts/context.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    description: str = ""
    system_prompt: str | None = None
    provider: dict[str, Any] | None = None
    tools: tuple[str, ...] | None = None
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: CompletionContract = Field(default_factory=CompletionContract)
    limits: Limits | None = None
    parent_close: ParentClose = ParentClose.CANCEL
    tool_profile: ToolProfile | None = None

    @field_validator("tools")
    @classmethod
    def _registered_names_only(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in value or ():
            if ":" in name or "." in name or not name.strip():
                raise ValueError(
                    f"tool {name!r} is not a registered tool name (a definition never names code)"
                )
        return value

    def profile(self) -> AgentProfile:
        """The profile a ``Task`` call (or a team member) is started with."""
        tools = self.tools
        if tools is None and self.tool_profile is not None:
            tools = PROFILE_TOOLS[self.tool_profile]
        return AgentProfile(
            description=self.description,
            system_prompt=self.system_prompt,
            provider=self.provider,
            tools=tools,
            tool_choice=self.tool_choice,
            contract=self.contract,
            limits=self.limits,
            parent_close=self.parent_close,
            tool_profile=self.tool_profile,
        )


def _markdown(text: str, source: str) -> dict[str, Any]:
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise ConfigError(f"{source}: a Markdown definition starts with front matter (---)")
    data = load_yaml(match.group(1), source=source) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the front matter must be a mapping")
    body = text[match.end() :].strip()
    if body and data.get("system_prompt") is not None:
        raise ConfigError(f"{source}: give the system prompt once: front matter or body")
    if body:
        data["system_prompt"] = body
    return data


def _load(path: Path) -> dict[str, Any]:
    source = f"agent definition {path}"
    try:
        if path.stat().st_size > MAX_DEFINITION_BYTES:
            raise ConfigError(f"{source}: larger than {MAX_DEFINITION_BYTES} bytes; refused")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    data = _markdown(text, source) if path.suffix == ".md" else load_yaml(text, source=source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping of agent fields")
    return data


def read_definition(path: Path) -> tuple[str, AgentProfile]:
    """``(name, profile)`` of the definition file ``path``.

    Raises:
        ConfigError: unreadable, too large, not UTF-8, invalid YAML or front
            matter, an unknown field, a tool that is a code path, a bad or
            reserved name (the message names the file).
    """
    data = _load(path)
    try:
        definition = AgentDefinition.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(document)"
        message = str(first.get("msg")).removeprefix("Value error, ")
        raise ConfigError(f"agent definition {path}: {where}: {message}") from None
    name = definition.name if definition.name is not None else path.stem
    if not NAME_PATTERN.match(name):
        raise ConfigError(
            f"agent definition {path}: name {name!r} must be lower-case letters, digits, "
            "'-' or '_', starting with a letter"
        )
    if name in RESERVED_AGENTS:
        raise ConfigError(f"agent definition {path}: {name!r} is reserved for the runtime")
    return name, definition.profile()
