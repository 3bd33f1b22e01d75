"""Running git for the worktree manager: one function, one error, one environment.

Every git command the launcher runs goes through :func:`git`.  The
environment is fixed so the launcher behaves the same on every worker:

* ``LC_ALL=C``: stderr is English, so transient lock errors can be recognised;
* ``GIT_TERMINAL_PROMPT=0``: git never waits for a password on a worker;
* ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ``GIT_COMMON_DIR`` are
  dropped: a worker started from a git hook must not aim every command at the
  hook's repository;
* ``core.hooksPath=/dev/null``: the repository's hooks (``post-checkout`` on
  ``worktree add``, ``pre-commit`` on the result commit) never run in the
  launcher.  They are the repository owner's human workflow, and a hostile
  repository of a batch must not run code in the worker through them;
* ``gc.auto=0`` and ``maintenance.auto=false``: no background repack or
  prune starts in a repository that other sessions are writing to;
* no program the repository's configuration names runs in the launcher:
  ``core.fsmonitor=false``, ``submodule.recurse=false``, an empty
  ``diff.external``, and every filter (``clean``, ``smudge``, ``process``)
  and diff driver (``textconv``, ``command``) the repository's own
  configuration defines is overridden empty (:func:`_disarmed`; the system,
  global and command-line scopes are the operator's and stay as they are).
  A session's Bash can write the ``.git/config`` of a workspace that is a
  repository's main checkout; the launcher, which runs unsandboxed, must not
  then run what it names
  (docs/security.md);
* the repository locks this thread holds are inherited (``pass_fds``): a git
  orphaned by the launcher's death keeps the lock until it exits (lock.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces.lock import held_fds

__all__ = ["COMMIT_AUTHOR", "TRANSIENT_MARKERS", "GitCommandError", "git", "is_transient"]

#: Name and e-mail of every result commit: fixed, so a worker with no git
#: identity configured still commits (``git commit`` refuses without one).
COMMIT_AUTHOR = ("nahida-workers", "nahida-workers@localhost")

#: Fragments of git's stderr that mean "another git process holds a lock right
#: now" (case B22's probe: concurrent ``git worktree add`` on one repository).
TRANSIENT_MARKERS = (
    "could not lock config file",
    "failed to read",  # .git/worktrees/<other>/commondir, half-written by another add
    "index.lock",
    "file exists",
    "cannot lock ref",
    "unable to create",
)

_DROPPED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")
_CONFIG = (
    "-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
    "-c", "core.fsmonitor=false", "-c", "submodule.recurse=false", "-c", "diff.external=",
)  # fmt: skip
#: Configuration keys that name a program git would run for the launcher's commands.
_PROGRAM_KEYS = r"^(filter|diff)\..+\.(clean|smudge|process|textconv|command)$"


class GitCommandError(Exception):
    """A git command exited non-zero.

    Internal to :mod:`nahida_workers.workspaces`: the manager turns it into
    :class:`~nahida_workers.errors.WorktreeUnavailableError` or retries it.

    Attributes:
        args_: the git arguments (without ``git`` and the fixed ``-c`` options).
        returncode: git's exit status.
        stderr: git's standard error, stripped.
    """

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        lines = stderr.splitlines()
        errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))] or lines[-1:]
        super().__init__(f"git {' '.join(args)} exited {returncode}: {'; '.join(errors)}")
        self.args_ = tuple(args)
        self.returncode = returncode
        self.stderr = stderr


def is_transient(error: GitCommandError) -> bool:
    """Whether git failed on a lock another git process holds (retrying may succeed)."""
    text = error.stderr.lower()
    return any(marker in text for marker in TRANSIENT_MARKERS)


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update({"LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"})
    if extra:
        env.update(extra)
    return env


def git(
    cwd: Path,
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``git <args>`` in ``cwd`` and return the completed process (text, stripped later).

    Args:
        cwd: directory the command runs in (``git -C``).
        *args: git arguments, e.g. ``("worktree", "add", path, branch)``.
        check: raise :class:`GitCommandError` on a non-zero exit (default).
        env: extra environment variables for this command (the commit identity).
        timeout_s: seconds before the command is killed; a hung git must not
            hold the repository lock for ever.

    Raises:
        GitCommandError: git exited non-zero (``check``) or timed out (returncode -1).
        WorktreeUnavailableError: no ``git`` executable on this worker.
    """
    command = ["git", "-C", str(cwd), *_CONFIG, *_disarmed(cwd), *args]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            env=_environment(env),
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            pass_fds=held_fds(),  # an orphaned git keeps the repository lock (lock.py)
        )
    except FileNotFoundError as exc:
        raise WorktreeUnavailableError(f"git is not installed on this worker: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise GitCommandError(args, -1, f"timed out after {timeout_s} s") from exc
    if check and done.returncode != 0:
        raise GitCommandError(args, done.returncode, done.stderr.strip())
    return done


def _disarmed(cwd: Path) -> list[str]:
    """``-c KEY=`` for every filter or diff-driver program the repository's config names.

    Only the repository's own files are read (``--local`` and ``--worktree``,
    their includes followed): the system, global and command-line scopes are
    the operator's.  Reading runs nothing; an empty value turns the program
    off (and a filter is no longer ``required``).  A directory that is not a
    repository yet, or a git that cannot read it, gives no overrides.
    """
    overrides: list[str] = []
    for scope in ("--local", "--worktree"):
        for key in _program_keys(cwd, scope):
            overrides += ["-c", f"{key}="]
            if key.startswith("filter."):
                overrides += ["-c", f"{key.rsplit('.', 1)[0]}.required=false"]
    return overrides


def _program_keys(cwd: Path, scope: str) -> list[str]:
    """The keys of :data:`_PROGRAM_KEYS` set in one configuration scope of the repository."""
    try:
        command = ["git", "-C", str(cwd), "config", scope, "--includes", "--null"]
        done = subprocess.run(
            [*command, "--get-regexp", _PROGRAM_KEYS],
            capture_output=True,
            text=True,
            errors="replace",
            env=_environment(None),
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    keys = (entry.split("\n", 1)[0].strip() for entry in done.stdout.split("\0"))
    return [key for key in keys if key]
