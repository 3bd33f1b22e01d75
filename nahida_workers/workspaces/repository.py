"""What the launcher needs to know about a workspace's repository, read from git.

:func:`open_repository` refuses clearly, before anything is created, when the
workspace is not there on this worker or is not inside a git working tree
(DESIGN.md section 8; a workspace must be reachable by the worker that runs
the session).  :func:`resolve_base` gives the commit a caller records before it
asks for a worktree, and :func:`list_worktrees` parses ``git worktree list``
(call it under the repository lock: it reads every registration, and fails
while another process is writing one).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from nahida_workers.errors import ConfigError, WorkspaceUnavailableError
from nahida_workers.workspaces.git import GitCommandError, git

__all__ = ["Repository", "WorktreeEntry", "list_worktrees", "open_repository", "resolve_base"]


@dataclass(frozen=True)
class Repository:
    """A git repository as seen from a session's workspace.

    Attributes:
        workspace: the workspace directory asked for (absolute, resolved).
        toplevel: the working tree that contains it (the main one or a linked one).
        subdir: ``workspace`` relative to ``toplevel`` (``.`` when equal); a
            session's worktree workspace is the same subdirectory of its worktree.
        common_dir: the git dir every worktree of the repository shares
            (``.git`` of the main working tree); the lock file lives here.
        main_root: the repository's main working tree (the git dir itself for a
            bare repository, or a separate git dir, seen from a linked
            worktree); default worktree paths hang off it.
    """

    workspace: Path
    toplevel: Path
    subdir: Path
    common_dir: Path
    main_root: Path


@dataclass(frozen=True)
class WorktreeEntry:
    """One registered worktree, from ``git worktree list --porcelain -z``.

    Attributes:
        path: where git believes the worktree is (it may be gone: ``prunable``).
        head: its HEAD commit (40 hex digits; zeros for a broken entry).
        branch: full ref name checked out (``refs/heads/...``), None when detached.
        locked: the lock reason (``""`` when locked without one), None when unlocked.
        prunable: why git would prune it, None when it is healthy.
    """

    path: Path
    head: str
    branch: str | None
    locked: str | None
    prunable: str | None


def open_repository(workspace: Path) -> Repository:
    """Check that ``workspace`` is here and inside a git working tree; describe its repository.

    Args:
        workspace: the session's workspace directory.

    Returns:
        The :class:`Repository` the workspace belongs to.

    Raises:
        WorkspaceUnavailableError: ``workspace_missing`` when the path is not a
            directory on this worker (message names the host: workspaces must be
            reachable by the worker that runs the session, one host or a shared
            filesystem), ``not_a_git_repository`` when git finds no working tree
            there (a plain directory, a bare repository, a ``.git`` dir, a
            repository git refuses as of dubious ownership).
    """
    path = Path(workspace).expanduser().absolute()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise WorkspaceUnavailableError(
            f"workspace {path} {what} on worker host {socket.gethostname()!r}: a workspace must "
            "be reachable by the worker that runs the session (one host, or a filesystem "
            "every worker mounts at the same path)",
            code="workspace_missing",
        )
    done = git(
        path,
        "rev-parse",
        "--path-format=absolute",
        "--is-inside-work-tree",
        "--show-toplevel",
        "--git-common-dir",
        "--absolute-git-dir",
        check=False,
    )
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 4 or lines[0] != "true":
        reason = done.stderr.strip().splitlines()[-1:] or ["not inside a working tree"]
        raise WorkspaceUnavailableError(
            f"workspace {path} is not inside a git working tree: {reason[0]}",
            code="not_a_git_repository",
        )
    toplevel, common_dir, git_dir = Path(lines[1]), Path(lines[2]), Path(lines[3])
    resolved = path.resolve()
    try:
        subdir = resolved.relative_to(toplevel.resolve())
    except ValueError:  # a symlinked workspace whose target git reports differently
        subdir = Path(".")
    return Repository(
        workspace=resolved,
        toplevel=toplevel,
        subdir=subdir,
        common_dir=common_dir,
        main_root=_main_root(toplevel, git_dir, common_dir),
    )


def _main_root(toplevel: Path, git_dir: Path, common_dir: Path) -> Path:
    # Not from `git worktree list`: that reads every .git/worktrees/<name>/ and
    # fails ("failed to read .../commondir") while another process is writing
    # one, and this runs before the repository lock is taken (case B22).
    if git_dir == common_dir:
        return toplevel  # the workspace is in the main working tree
    if common_dir.name == ".git":
        return common_dir.parent  # a linked worktree of an ordinary repository
    return common_dir  # a bare repository (or a separate git dir) with linked worktrees


def resolve_base(repo: Repository, rev: str = "HEAD") -> str:
    """The commit ``rev`` names now (40 hex digits): a base a caller records before creating.

    Args:
        repo: from :func:`open_repository`.
        rev: any git revision (``HEAD``, ``origin/main``, a sha); resolved in
            the workspace's own working tree.

    Raises:
        WorkspaceUnavailableError: ``no_commits`` when ``rev`` is ``HEAD`` and
            the repository has no commit yet (a worktree needs a base commit).
        ConfigError: ``rev`` names no commit of the repository.
    """
    try:
        done = git(repo.toplevel, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}")
    except GitCommandError as exc:
        if rev == "HEAD":
            raise WorkspaceUnavailableError(
                f"repository {repo.toplevel} has no commits: a worktree needs a base commit",
                code="no_commits",
            ) from exc
        raise ConfigError(f"base {rev!r} names no commit of {repo.toplevel}") from exc
    return done.stdout.strip()


def list_worktrees(cwd: Path) -> list[WorktreeEntry]:
    """Every registered worktree of the repository at ``cwd``, the main one first.

    Raises:
        GitCommandError: git failed (a transient lock error while another
            process registers a worktree is possible outside the lock).
    """
    out = git(cwd, "worktree", "list", "--porcelain", "-z").stdout
    entries: list[WorktreeEntry] = []
    fields: dict[str, str | None] = {}
    for item in out.split("\0"):
        if item:
            key, _, value = item.partition(" ")
            fields[key] = value if _ else None
            continue
        if "worktree" in fields:
            entries.append(_entry(fields))
        fields = {}
    return entries


def _entry(fields: dict[str, str | None]) -> WorktreeEntry:
    return WorktreeEntry(
        path=Path(fields["worktree"] or ""),
        head=fields.get("HEAD") or "0" * 40,
        branch=fields.get("branch"),
        locked=(fields["locked"] or "") if "locked" in fields else None,
        prunable=(fields["prunable"] or "") if "prunable" in fields else None,
    )
