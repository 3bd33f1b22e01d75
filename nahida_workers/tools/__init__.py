"""Workspace-confined tools (DESIGN.md section 5) and the one way to run them.

Executors call :func:`run_tool`; job specs pick tools from
:func:`default_registry`.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.tools.base import (
    Placement,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.edit import Edit
from nahida_workers.tools.glob import Glob
from nahida_workers.tools.goal import UpdateGoal
from nahida_workers.tools.grep import Grep
from nahida_workers.tools.ls import LS
from nahida_workers.tools.read import Read
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.sandbox import Sandbox
from nahida_workers.tools.workspace import cap_text, resolve_inside
from nahida_workers.tools.write import Write

__all__ = [
    "LS",
    "Bash",
    "Edit",
    "Glob",
    "Grep",
    "Placement",
    "Read",
    "Sandbox",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "UpdateGoal",
    "Write",
    "cap_text",
    "default_registry",
    "default_tools",
    "resolve_inside",
    "run_tool",
]


def default_tools(
    *,
    bash_timeout_s: float = 120.0,
    max_capture_bytes: int = 1 << 20,
    sandbox: Sandbox | None = None,
) -> list[Tool]:
    """One instance of each built-in tool: Read, Glob, Grep, LS, Bash, Write, Edit, UpdateGoal.

    Args:
        bash_timeout_s: Bash's default and maximum command timeout, in seconds.
        max_capture_bytes: bytes Bash keeps per output stream (head + tail).
        sandbox: where Bash's commands run (default: bwrap, no network).
    """
    return [
        Read(),
        Glob(),
        Grep(),
        LS(),
        Bash(timeout_s=bash_timeout_s, max_capture_bytes=max_capture_bytes, sandbox=sandbox),
        Write(),
        Edit(),
        UpdateGoal(),
    ]


def default_registry(**kw: Any) -> ToolRegistry:
    """A :class:`ToolRegistry` of :func:`default_tools` (``kw`` is passed to it).

    Raises:
        TypeError: an unknown keyword.
    """
    return ToolRegistry(default_tools(**kw))
