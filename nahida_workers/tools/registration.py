"""Which tools a job may name, built for one session (DESIGN.md section 5).

A registry is built from a job's tool *names*: the built-in tools, the
operator's ``NAHIDA_EXTRA_TOOLS`` and the ``nahida.tools`` entry points
(:mod:`nahida_workers.plugins`).  A name is only looked up, never imported;
the tools that start processes get the sandbox the settings and the job's
``network`` describe (:mod:`nahida_workers.tools.sandbox`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from nahida_workers import worker_secrets
from nahida_workers.core.children import TASK_TOOL
from nahida_workers.errors import ConfigError
from nahida_workers.plugins import (
    TOOL_GROUP,
    TOOL_HOW,
    StopHooks,
    entry_points_of,
    load_path,
    unknown_name_error,
)
from nahida_workers.settings import Settings
from nahida_workers.tools import default_tools
from nahida_workers.tools.base import Placement, Tool, ToolRegistry
from nahida_workers.tools.sandbox import Sandbox, sandbox_from
from nahida_workers.tools.team import SESSION_BOUND_TOOLS

__all__ = ["build_registry", "load_tool", "sandbox_for", "stop_hooks_of"]


def load_tool(path: str) -> Tool:
    """Instantiate an operator's extra tool named ``package.module:ClassName``.

    Only for ``NAHIDA_EXTRA_TOOLS`` (the operator's setting), never for a
    string from a job (:mod:`nahida_workers.plugins`).

    Raises:
        ConfigError: the path does not name a Tool class.
    """
    return _instantiate(load_path(path, what="tool"), path)


def _instantiate(target: object, where: str) -> Tool:
    """A Tool subclass instantiated (no arguments), or a Tool instance as is."""
    if isinstance(target, Tool):
        return target
    if not (isinstance(target, type) and issubclass(target, Tool)):
        raise ConfigError(f"{where!r} is not a Tool class")
    try:
        return target()
    except TypeError as exc:
        raise ConfigError(f"cannot load tool {where!r}: {exc}") from None


def _registered_tool(name: str) -> Tool | None:
    """The tool an installed ``nahida.tools`` entry point named ``name`` provides, or None.

    Raises:
        ConfigError: the entry point does not load to a Tool of that name.
    """
    entry = entry_points_of(TOOL_GROUP).get(name)
    if entry is None:
        return None
    try:
        target = entry.load()
    except Exception as exc:  # an operator's package that fails to import
        raise ConfigError(f"cannot load tool {name!r} ({entry.value}): {exc}") from None
    tool = _instantiate(target, entry.value)
    if tool.spec.name != name:
        raise ConfigError(
            f"entry point {name!r} of {TOOL_GROUP!r} makes a tool named {tool.spec.name!r}"
        )
    return tool


#: Names the runtime gives its own tools (Task, the team tools, TodoWrite): a
#: registered tool of such a name would be shadowed or would shadow them.
RESERVED_NAMES = frozenset((TASK_TOOL, *SESSION_BOUND_TOOLS))


def _not_reserved(tool: Tool | None, where: str) -> Tool | None:
    """``tool``, unless it takes a name the runtime reserves.

    Raises:
        ConfigError: the tool is named like one of :data:`RESERVED_NAMES`.
    """
    if tool is not None and tool.spec.name in RESERVED_NAMES:
        raise ConfigError(
            f"{where!r} makes a tool named {tool.spec.name!r}, a name the runtime reserves "
            f"for its own tool ({', '.join(sorted(RESERVED_NAMES))})"
        )
    return tool


def sandbox_for(settings: Settings, *, network: bool = False) -> Sandbox:
    """The sandbox of the processes tools start, from settings and the job's ``network``.

    The env file the settings were read from is hidden inside the sandbox
    (it may hold every secret of the fleet), beside ``NAHIDA_SANDBOX_HIDE``.

    Raises:
        ConfigError: an invalid sandbox setting.
    """
    hide = settings.sandbox_hide
    env_file = Path(worker_secrets.lookup("NAHIDA_ENV_FILE") or ".env").resolve()
    if env_file.is_file():
        hide = f"{hide}:{env_file}" if hide else str(env_file)
    return sandbox_from(
        settings.sandbox,
        bwrap=settings.sandbox_bwrap,
        env_names=settings.sandbox_env,
        hide=hide,
        network=network,
    )


def stop_hooks_of(settings: Settings) -> StopHooks:
    """The stop hooks the operator registered (``NAHIDA_STOP_HOOKS`` and entry points)."""
    return StopHooks(frozenset(settings.stop_hooks))


def build_registry(
    names: Sequence[str],
    settings: Settings,
    *,
    placement: Mapping[str, str] | None = None,
    bash_timeout_s: float = 120.0,
    network: bool = False,
) -> ToolRegistry:
    """A registry of ``names``; a session worker and a tool worker build the same one.

    ``names`` come from a job and are only looked up, never imported
    (:mod:`nahida_workers.plugins`): the built-in tools of
    :func:`default_tools`, the operator's ``NAHIDA_EXTRA_TOOLS``, and the
    ``nahida.tools`` entry points (one is loaded only when named).
    Placement: settings first, then the job spec (the more specific).

    Args:
        names: the job's tool names.
        settings: the operator's settings (extra tools, placement, sandbox).
        placement: the job's placement overrides.
        bash_timeout_s: Bash's default and maximum timeout, in seconds.
        network: the job's ``network`` (Bash's sandbox keeps or drops it).

    Raises:
        ConfigError: a name nobody registered (a ``module:attr`` string
            included), a bad placement or sandbox setting.
    """
    sandbox = sandbox_for(settings, network=network)
    tools: dict[str, Tool] = {
        t.spec.name: t for t in default_tools(bash_timeout_s=bash_timeout_s, sandbox=sandbox)
    }
    for path in settings.extra_tools:
        tool = load_tool(path)
        _not_reserved(tool, path)
        tools[tool.spec.name] = tool
    chosen: list[Tool] = []
    for name in names:
        found = tools.get(name) or _not_reserved(_registered_tool(name), name)
        if found is None:
            known = set(tools) | set(entry_points_of(TOOL_GROUP))
            raise unknown_name_error("tool", name, known, TOOL_HOW)
        chosen.append(found)
    chosen_names = {t.spec.name for t in chosen}
    try:
        overrides = {
            k: Placement(v)
            for k, v in {**settings.tool_placement, **(placement or {})}.items()
            if k in chosen_names
        }
    except ValueError as exc:
        raise ConfigError(f"invalid placement: {exc}") from None
    return ToolRegistry(chosen, placement=overrides)
