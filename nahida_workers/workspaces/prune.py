"""Leftovers of session worktrees, and removing them safely (``nahida worktrees``).

A session in a worktree leaves, by design, its result branch
``nahida/<session id>`` and its base ref ``refs/nahida/base/<session id>``
(``workspaces/model.py``); a crash can also leave a worktree directory, and
removed worktrees leave empty folders under ``.nahida-worktrees``.
:func:`leftovers` lists them per session, :func:`plan` decides -- a pure
function of what was found and who is live -- and :func:`prune` carries the
decisions out with :meth:`WorktreeManager.discard`, re-asking under the
repository lock whether the session is live (a live session's worktree is
never removed: the session takes the same lock to make it).

What is removed by default: debris (a branch still at its base, a lone base
ref) and results already merged into the repository's ``HEAD``.  A result
not merged yet is kept unless ``results`` is set.  A session the ledger does
not know is kept unless ``unknown`` is set (it may be another fleet's).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path

import nahida_workers.workspaces.ops as ops
from nahida_workers.workspaces.git import git
from nahida_workers.workspaces.model import worktree_path
from nahida_workers.workspaces.repository import open_repository
from nahida_workers.workspaces.worktrees import WorktreeManager

__all__ = [
    "Leftover",
    "Liveness",
    "PruneDecision",
    "empty_folders",
    "leftovers",
    "plan",
    "prune",
]


class Liveness(StrEnum):
    """What the ledger says of a leftover's session."""

    LIVE = "live"  # queued, running or parked: its worktree is in use or about to be
    ENDED = "ended"  # status done
    UNKNOWN = "unknown"  # not in this ledger


@dataclass(frozen=True)
class Leftover:
    """One session's branch, base ref and worktree in one repository.

    Attributes:
        repo: the repository's main working tree.
        session_id: whose they are.
        tip / base: the branch's and the base ref's commits (None: absent).
        worktree: its registered healthy worktree, if any.
        dirty: that worktree holds uncommitted changes.
        merged: the branch's tip is an ancestor of the repository's ``HEAD``
            (its result was adopted).
    """

    repo: Path
    session_id: str
    tip: str | None
    base: str | None
    worktree: Path | None
    dirty: bool
    merged: bool

    @property
    def has_work(self) -> bool:
        """Commits beyond the base, or uncommitted changes in its worktree."""
        return self.dirty or (self.tip is not None and self.tip != self.base)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields."""
        return {
            "repo": str(self.repo),
            "session_id": self.session_id,
            "branch": f"nahida/{self.session_id}" if self.tip is not None else None,
            "tip": self.tip,
            "base": self.base,
            "worktree": str(self.worktree) if self.worktree is not None else None,
            "dirty": self.dirty,
            "merged": self.merged,
            "has_work": self.has_work,
        }


@dataclass(frozen=True)
class PruneDecision:
    """What prune does with one leftover: ``remove`` or ``keep``, and why."""

    leftover: Leftover
    remove: bool
    reason: str


def leftovers(manager: WorktreeManager, repo: Path) -> list[Leftover]:
    """Every session branch or base ref of ``repo`` with its worktree, by session id.

    Raises:
        WorkspaceUnavailableError: ``repo`` is not a reachable git working tree.
        WorktreeUnavailableError: git kept failing.
    """
    info = open_repository(repo)
    head = ops.read_ref(info, "HEAD")
    found = []
    for branch in manager.branches(repo):
        dirty = branch.worktree is not None and bool(
            git(branch.worktree, "status", "--porcelain", check=False).stdout.strip()
        )
        merged = (
            branch.tip is not None and head is not None and ops.is_ancestor(info, branch.tip, head)
        )
        found.append(
            Leftover(
                info.main_root,
                branch.session_id,
                branch.tip,
                branch.base,
                branch.worktree,
                dirty,
                merged,
            )
        )
    return found


def plan(
    found: Sequence[Leftover],
    liveness: Callable[[str], Liveness],
    *,
    results: bool = False,
    unknown: bool = False,
) -> list[PruneDecision]:
    """Decide per leftover (pure: no git, no ledger beyond ``liveness``).

    Rules, in order: a live session's leftovers are kept; an unknown
    session's are kept unless ``unknown``; debris (no work) is removed; a
    merged result is removed; an unmerged result (or a dirty worktree) is
    kept unless ``results``.
    """
    decisions = []
    for item in found:
        alive = liveness(item.session_id)
        if alive is Liveness.LIVE:
            decisions.append(PruneDecision(item, False, "session is live"))
        elif alive is Liveness.UNKNOWN and not unknown:
            decisions.append(PruneDecision(item, False, "session unknown to this ledger"))
        elif not item.has_work:
            decisions.append(PruneDecision(item, True, "no work beyond its base"))
        elif item.merged and not item.dirty:
            decisions.append(PruneDecision(item, True, "result merged into HEAD"))
        elif results:
            decisions.append(PruneDecision(item, True, "result not merged (--results)"))
        else:
            decisions.append(
                PruneDecision(item, False, "result not merged (keep it, or pass --results)")
            )
    return decisions


def prune(
    manager: WorktreeManager,
    decisions: Sequence[PruneDecision],
    liveness: Callable[[str], Liveness],
    *,
    dry_run: bool = False,
) -> list[PruneDecision]:
    """Carry out ``decisions``; what was done (a session found live at the last moment is kept).

    Raises:
        WorktreeUnavailableError: git kept failing on one session (the ones
            before it are done).
    """
    done = []
    for decision in decisions:
        item = decision.leftover
        if not decision.remove or dry_run:
            done.append(decision)
            continue
        removed = manager.discard(
            item.repo, item.session_id, unless=partial(_live, liveness, item.session_id)
        )
        done.append(decision if removed else PruneDecision(item, False, "session became live"))
    return done


def _live(liveness: Callable[[str], Liveness], session_id: str) -> bool:
    return liveness(session_id) is Liveness.LIVE


def empty_folders(manager: WorktreeManager, repo: Path, *, dry_run: bool = False) -> list[Path]:
    """Remove empty folders the worktrees of ``repo`` left (session folders, then the parents).

    Only directories that are empty (after the debris of an interrupted
    removal, ``*.nahida-removing-*``, is swept); a registered worktree is
    never empty (it holds ``.git``).  Returns the folders removed (or that
    would be, with ``dry_run``).
    """
    info = open_repository(repo)
    folder = worktree_path(info, "x", manager.root).parent
    if not folder.is_dir():
        return []
    removed: list[Path] = []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and ".nahida-removing-" in child.name:
            removed.append(child)
            if not dry_run:
                shutil.rmtree(child, ignore_errors=True)
        elif child.is_dir() and not child.is_symlink() and not any(child.iterdir()):
            removed.append(child)
            if not dry_run:
                child.rmdir()
    # The repository's folder, then ``.nahida-worktrees`` (never a configured root).
    for parent in (folder,) if manager.root is not None else (folder, folder.parent):
        if any(p not in removed for p in parent.iterdir()):
            break
        removed.append(parent)
        if not dry_run:
            parent.rmdir()
    return removed
