"""What a session changed in its workspace, for the verifier (DESIGN.md section 6).

:func:`head_commit` is the *base* recorded before a session's first change;
:func:`workspace_diff` is ``git diff`` of the workspace against it, untracked
files included (as additions), so a fresh verifier sees exactly what the
session did -- commits it made included.  Read-only: nothing here touches
the index or the working tree, and no repository-configured diff driver or
text conversion runs (``--no-ext-diff --no-textconv``; hooks are off in
every git command, ``workspaces/git.py``).
"""

from __future__ import annotations

from pathlib import Path

from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces.git import GitCommandError, git

__all__ = ["MAX_DIFF_BYTES", "head_commit", "workspace_diff"]

#: Characters of diff read at most (the verifier can Read the files for more).
MAX_DIFF_BYTES = 256 * 1024
#: Untracked files shown as additions, at most.
MAX_UNTRACKED = 50
_TIMEOUT_S = 60.0
_DIFF = ("diff", "--no-color", "--no-ext-diff", "--no-textconv")


def head_commit(path: Path) -> str | None:
    """The commit ``HEAD`` names in the repository at ``path``; None: not git, or no commit."""
    if not path.is_dir():
        return None
    try:
        done = git(
            path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False, timeout_s=30
        )
    except (WorktreeUnavailableError, GitCommandError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and len(sha) == 40 else None


def workspace_diff(path: Path, base: str | None, *, max_bytes: int = MAX_DIFF_BYTES) -> str:
    """``git diff BASE`` of the workspace at ``path``, untracked files as additions.

    Returns "" when there is no base (not a git repository) or git fails: the
    verifier then works from the changed-file list and its tools.
    """
    if base is None or not path.is_dir():
        return ""
    try:
        tracked = git(path, *_DIFF, base, "--", ".", check=False, timeout_s=_TIMEOUT_S)
        others = git(
            path, "ls-files", "--others", "--exclude-standard", "-z", "--", ".",
            check=False, timeout_s=_TIMEOUT_S,
        )  # fmt: skip
    except (WorktreeUnavailableError, GitCommandError):
        return ""
    parts = [tracked.stdout] if tracked.returncode == 0 else []
    size = len(parts[0]) if parts else 0
    names = [n for n in others.stdout.split("\0") if n][:MAX_UNTRACKED]
    for name in names:
        if size >= max_bytes:
            break
        try:  # exit status 1 means "they differ", which is the point
            added = git(
                path, *_DIFF, "--no-index", "--", "/dev/null", name,
                check=False, timeout_s=_TIMEOUT_S,
            )  # fmt: skip
        except (WorktreeUnavailableError, GitCommandError):
            continue
        parts.append(added.stdout)
        size += len(added.stdout)
    text = "".join(parts)
    return text if len(text) <= max_bytes else text[:max_bytes] + "\n[... diff cut ...]\n"
