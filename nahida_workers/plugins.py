"""Code the operator registers: custom tools and stop hooks (DESIGN.md section 5).

A string from a job never names code.  A job -- posted over the API, run by
``nahida batch``, fired by a schedule, or read back from the ledger by a
worker -- names tools and stop hooks by their *registered* names only; a
name nobody registered is a :class:`~nahida_workers.errors.ConfigError`
(a usage error: 400/422 over the API, exit 2 on the command line, a run
sealed ``failed/invalid_config`` in a worker), and nothing is imported.

Registration is the operator's, in two ways:

* an entry point of the installing package (``importlib.metadata``):
  group :data:`TOOL_GROUP` (``nahida.tools``; the name is the tool's name,
  the object a :class:`~nahida_workers.tools.base.Tool` subclass) or
  :data:`STOP_HOOK_GROUP` (``nahida.stop_hooks``; the name is what a job
  writes in ``stop_hooks``, the object a function);
* a server-side setting: ``NAHIDA_EXTRA_TOOLS`` (``module:Class`` paths,
  each loaded when a registry is built; the job names the tool by its
  ``spec.name``) and ``NAHIDA_STOP_HOOKS`` (``module:function`` paths a job
  may name as written).

Entry points are listed once per process (:func:`entry_points_of`); an entry
point is loaded only when a job names it.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from nahida_workers.errors import ConfigError

__all__ = [
    "STOP_HOOK_GROUP",
    "TOOL_GROUP",
    "TOOL_HOW",
    "StopHooks",
    "entry_points_of",
    "load_path",
    "unknown_name_error",
]

log = logging.getLogger(__name__)

#: Entry-point group of custom tools: ``ToolName = "package.module:ToolClass"``.
TOOL_GROUP = "nahida.tools"

#: Entry-point group of stop hooks: ``hook_name = "package.module:function"``.
STOP_HOOK_GROUP = "nahida.stop_hooks"


@functools.lru_cache(maxsize=4)
def entry_points_of(group: str) -> Mapping[str, EntryPoint]:
    """The installed entry points of ``group`` by name (listed once per process).

    Tests that install an entry point call ``entry_points_of.cache_clear()``.
    """
    return {ep.name: ep for ep in entry_points(group=group)}


def load_path(path: str, *, what: str) -> Any:
    """Import the object an *operator* named ``package.module:attr``.

    Only for strings from the operator's settings or entry points, never
    from a job.

    Raises:
        ConfigError: the path is malformed or does not import.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what} {path!r} must be package.module:name")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {what} {path!r}: {exc}") from None


def unknown_name_error(what: str, name: str, known: Iterable[str], how: str) -> ConfigError:
    """The one usage error for a job naming something nobody registered.

    Args:
        what: ``tool`` or ``stop hook``.
        name: the job's string (shown with ``repr``).
        known: the registered names.
        how: how the operator registers one (the settings and the group).
    """
    listed = ", ".join(sorted(known)) or "none"
    code = " (a job names registered names, never code)" if ":" in name else ""
    return ConfigError(f"unknown {what} {name!r}{code}; registered: {listed}. {how}")


#: How an operator registers a stop hook (said in every refusal).
_STOP_HOOK_HOW = (
    "Register one in NAHIDA_STOP_HOOKS (module:function) or as an entry point "
    f"in the {STOP_HOOK_GROUP!r} group of an installed package"
)

#: How an operator registers a tool (said in every refusal).
TOOL_HOW = (
    "Register one in NAHIDA_EXTRA_TOOLS (module:Class) or as an entry point "
    f"in the {TOOL_GROUP!r} group of an installed package"
)


@dataclass(frozen=True)
class StopHooks:
    """The stop hooks a job may name (DESIGN.md section 6, stage "stop hooks").

    Attributes:
        paths: ``NAHIDA_STOP_HOOKS``: ``module:function`` strings the operator
            listed; a job names one as written.
        group: the entry-point group (a job names an entry point by its name).
    """

    paths: frozenset[str] = field(default_factory=frozenset)
    group: str = STOP_HOOK_GROUP

    def names(self) -> set[str]:
        """Every name a job may write in ``stop_hooks``."""
        return set(self.paths) | set(entry_points_of(self.group))

    def check(self, names: Iterable[str]) -> None:
        """Refuse the first name nobody registered.

        Raises:
            ConfigError: an unregistered stop hook (nothing is imported).
        """
        known: set[str] | None = None
        for name in names:
            if name in self.paths:
                continue
            known = known if known is not None else self.names()
            if name not in known:
                raise unknown_name_error("stop hook", name, known, _STOP_HOOK_HOW)

    def load(self, name: str) -> Callable[..., Any]:
        """The registered hook ``name``, imported now.

        Raises:
            ConfigError: ``name`` is not registered, or it does not load to a callable.
        """
        self.check([name])
        if name in self.paths:
            hook = load_path(name, what="stop hook")
        else:
            try:
                hook = entry_points_of(self.group)[name].load()
            except Exception as exc:  # an operator's package that fails to import
                raise ConfigError(f"cannot load stop hook {name!r}: {exc}") from None
        if not callable(hook):
            raise ConfigError(f"stop hook {name!r} is not callable")
        return hook  # type: ignore[no-any-return]
