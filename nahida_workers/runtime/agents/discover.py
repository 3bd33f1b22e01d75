"""Agent definitions read from folders, merged into a spec at submit time (DESIGN.md section 8).

Two folders hold definition files (``runtime/agents/files.py``):

* the **config folder**, ``NAHIDA_AGENTS_DIR`` (default ``config/agents``,
  relative to the directory the command runs in; empty: none);
* the **repository folder**, ``.nahida/agents/`` in the session's workspace,
  read only when the job sets ``trust_workspace: true`` (a repository's
  files are its author's, not the operator's).  Files must stay inside the
  workspace (a symbolic link out of it is refused).

Precedence, lowest first: the built-in agents, the repository's, the config
folder's, the job's own ``agents:``.  A definition replaces a built-in of
its name, never an agent a higher-ranked source defines: the job's own
profiles always win, then the operator's config folder.

Definitions are read and checked where a job is checked -- ``nahida batch``
(per repository), ``nahida schedule add/apply``, ``POST /v1/sessions`` --
and merged into the session's config snapshot, so the worker never reads
them.  A broken definition is a :class:`~nahida_workers.errors.ConfigError`
naming the file: a usage error before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from nahida_workers.errors import ConfigError
from nahida_workers.providers.scripted import reads_a_file
from nahida_workers.runtime.agents.builtin import is_builtin
from nahida_workers.runtime.agents.files import DEFINITION_SUFFIXES, read_definition
from nahida_workers.runtime.dispatch.preflight import check_agent
from nahida_workers.runtime.profiles import AgentProfile
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.settings import Settings

__all__ = ["MAX_DEFINITIONS", "REPOSITORY_AGENTS", "read_folder", "with_agents"]

#: The repository folder of agent definitions, relative to the workspace.
REPOSITORY_AGENTS = Path(".nahida") / "agents"
#: Definition files one folder may hold.
MAX_DEFINITIONS = 100

Found = dict[str, tuple[AgentProfile, Path]]
S = TypeVar("S", bound=SessionSpec)


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def _names_a_file(provider: Mapping[str, object] | None) -> bool:
    """A provider (or a fallback of it) whose script is a file path."""
    todo = [provider] if provider is not None else []
    while todo:
        config = todo.pop()
        script = config.get("script")
        if script is not None and reads_a_file(script):
            return True
        fallbacks = config.get("fallbacks")
        if isinstance(fallbacks, list):
            todo += [f for f in fallbacks if isinstance(f, Mapping)]
    return False


def read_folder(folder: Path, *, inside: Path | None = None) -> Found:
    """The definitions of ``folder``: name -> (profile, file); {} when it does not exist.

    Files whose names start with ``.`` and other suffixes are ignored.

    Args:
        folder: the folder.
        inside: the root every file must resolve inside (a workspace).

    Raises:
        ConfigError: a broken definition, a file out of ``inside``, a name
            defined twice, more than :data:`MAX_DEFINITIONS` files.
    """
    if inside is not None and folder.exists() and not _inside(folder, inside):
        raise ConfigError(f"agent folder {folder} leads out of the workspace; refused")
    if not folder.is_dir():
        return {}
    files = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in DEFINITION_SUFFIXES and not p.name.startswith(".")
    )
    if len(files) > MAX_DEFINITIONS:
        raise ConfigError(f"agent folder {folder}: more than {MAX_DEFINITIONS} definitions")
    found: Found = {}
    for path in files:
        if inside is not None and not _inside(path, inside):
            raise ConfigError(f"agent definition {path} leads out of the workspace; refused")
        name, profile = read_definition(path)
        if _names_a_file(profile.provider):
            raise ConfigError(
                f"agent definition {path}: provider.script must be inline, not a file path"
            )
        if name in found:
            raise ConfigError(f"agent {name!r} is defined twice: {found[name][1]} and {path}")
        found[name] = (profile, path)
    return found


def with_agents(
    spec: S,
    *,
    settings: Settings,
    workspace: Path | None = None,
    config: bool = True,
) -> S:
    """``spec`` with the discovered definitions merged in, each checked like a job's profile.

    Args:
        spec: the job's session spec.
        settings: where the config folder is (``agents_dir``) and the tools
            and providers a definition is checked against.
        workspace: the session's workspace (its ``.nahida/agents/`` is read
            when ``spec.trust_workspace``).
        config: read the config folder too (a schedule merged it when added).

    Raises:
        ConfigError: a broken definition (the message names its file): bad
            YAML or front matter, an unknown field, an unknown or non-tool
            name, a provider that does not build, a script calling a tool the
            agent is not given.
    """
    found: Found = {}
    if spec.trust_workspace and workspace is not None:
        found.update(read_folder(workspace / REPOSITORY_AGENTS, inside=workspace))
    if config and settings.agents_dir:
        found.update(read_folder(Path(settings.agents_dir)))  # the operator's win
    merged = dict(spec.agents)
    for name, (profile, _path) in found.items():
        current = merged.get(name)
        if current is None or is_builtin(name, current):
            merged[name] = profile
    if merged == spec.agents:
        return spec
    result = spec.model_copy(update={"agents": merged})
    for name, (_profile, path) in found.items():
        if merged[name] is found[name][0]:
            try:
                check_agent(result, name, settings)
            except ConfigError as exc:
                raise ConfigError(f"agent definition {path}: {exc}") from None
    return result
