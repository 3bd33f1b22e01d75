"""One git worktree per session, made safe for parallel sessions (DESIGN.md section 8, case B22).

:class:`WorktreeManager` gives a session its own worktree on branch
``nahida/<session id>``, commits what the session left on that branch when it
ends, and removes the worktree or keeps it.  Every change to a repository's
worktrees and session refs holds the repository's file lock, so sessions on
different worker processes never race on ``.git/config.lock`` or on a
half-written ``.git/worktrees/<name>``; git failures are retried with
backoff, at most ``retries`` times.  Every method is idempotent per session
id, including after a crash at any point (see each method).

Workspaces must be reachable by the worker that runs the session: one host,
or a filesystem every worker mounts at the same path, with working ``flock``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import tenacity

import nahida_workers.workspaces.attempts as attempts
import nahida_workers.workspaces.ops as ops
from nahida_workers.errors import WorktreeUnavailableError
from nahida_workers.workspaces.git import GitCommandError, git
from nahida_workers.workspaces.lock import repository_lock
from nahida_workers.workspaces.model import SessionBranch, Worktree, worktree_path
from nahida_workers.workspaces.repository import Repository, open_repository, resolve_base

if TYPE_CHECKING:
    from nahida_workers.settings import Settings

__all__ = ["WorktreeManager"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_HEADS = "refs/heads/"


class WorktreeManager:
    """Creates, finishes and discards session worktrees of git repositories.

    Args:
        root: directory for worktrees (``NAHIDA_WORKTREE_ROOT``); None = beside
            each repository (see :func:`~nahida_workers.workspaces.model.worktree_path`).
        keep: the default of :meth:`finish`'s ``keep`` (``NAHIDA_WORKTREE_KEEP``).
        retries: retries of a failed step after its first attempt (B22: 3).
        lock_timeout_s: longest wait for the repository lock, seconds.
        stale_lock_s: age in seconds after which a git ``*.lock`` file of the
            session's own worktree or branch is a dead process's leftover.
        backoff_s: first retry pause, seconds; doubled per retry, plus jitter.
        sleep: how to pause (tests pass their own).
        on_retry: called with the failure before each retry pause (metrics,
            tests); every retry is also logged at WARNING.
        on_branch_created: fault-injection seam, called with the session id
            right after its branch was created and before its worktree is
            registered (the crash window of B22's ``variant_crash_mid_create``).
    """

    def __init__(
        self,
        *,
        root: Path | None = None,
        keep: bool = False,
        retries: int = 3,
        lock_timeout_s: float = 60.0,
        stale_lock_s: float = 300.0,
        backoff_s: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[BaseException], None] | None = None,
        on_branch_created: Callable[[str], None] | None = None,
    ) -> None:
        self.root = root
        self.keep = keep
        self.retries = retries
        self.lock_timeout_s = lock_timeout_s
        self.stale_lock_s = stale_lock_s
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._on_retry = on_retry
        self._on_branch_created = on_branch_created

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: object) -> WorktreeManager:
        """A manager configured by the ``worktree_*`` settings (keyword overrides win)."""
        options: dict[str, object] = {
            "root": Path(settings.worktree_root) if settings.worktree_root else None,
            "keep": settings.worktree_keep,
            "retries": settings.worktree_retries,
            "lock_timeout_s": settings.worktree_lock_timeout_s,
            "stale_lock_s": settings.worktree_stale_lock_s,
        }
        options.update(overrides)
        return cls(**options)  # type: ignore[arg-type]

    # -- reading ------------------------------------------------------------

    def base_of(self, repo: Path, rev: str = "HEAD") -> str:
        """The commit ``rev`` names in ``repo`` now: record it, then pass it to :meth:`ensure`.

        Raises:
            WorkspaceUnavailableError: as :meth:`ensure`; ``no_commits`` for a
                repository without a commit.
            ConfigError: ``rev`` names no commit.
        """
        return resolve_base(open_repository(repo), rev)

    def path_for(self, repo: Path, session_id: str) -> Path:
        """Where ``ensure`` puts the session's worktree (nothing is created)."""
        return worktree_path(open_repository(repo), session_id, self.root)

    def branches(self, repo: Path) -> list[SessionBranch]:
        """Every session branch or base ref of the repository, by session id.

        Raises:
            WorkspaceUnavailableError: ``repo`` is not a reachable git working tree.
            WorktreeUnavailableError: git kept failing (after the retries).
        """
        info = open_repository(repo)

        def read() -> list[SessionBranch]:
            with self._lock(info):
                return attempts.session_branches(info)

        return self._retrying(read, what=f"list the session branches of {info.main_root}")

    def orphans(self, repo: Path) -> list[SessionBranch]:
        """Session branches (or lone base refs) with no worktree, for a sweeper.

        The caller decides which sessions are still live.  Entries with
        ``has_work`` False hold nothing beyond their base (debris of a failed
        creation): :meth:`discard` them.  Entries with ``has_work`` True hold a
        finished session's result: keep them unless the result was adopted.
        """
        return [branch for branch in self.branches(repo) if branch.worktree is None]

    # -- creating -----------------------------------------------------------

    def ensure(self, repo: Path, session_id: str, *, base: str | None = None) -> Worktree:
        """Give ``session_id`` its own worktree of ``repo`` on ``nahida/<session id>``.

        The base is, in order: the one recorded for this session by an earlier
        attempt (``refs/nahida/base/<session id>``), else ``base``, else the
        workspace's HEAD commit now; it is recorded before the branch exists.
        Callers that persist the base themselves call :meth:`base_of` first.

        Idempotent per session id: a healthy worktree already on the branch is
        returned as it is (with any uncommitted work).  A branch left by an
        earlier attempt that failed or crashed is attached to (``git worktree
        add <path> nahida/<id>``) when it is at the base or descends from it; a
        registration left by a killed ``worktree add`` is dropped and made
        again; stale registrations are pruned before every add.  Never a second
        branch or worktree for one session, never ``.git/config`` tracking entries.

        Args:
            repo: the session's workspace (a git working tree or a directory in one).
            session_id: letters, digits, ``.``, ``_``, ``-`` (it names a branch).
            base: a commit (any revision) to start from on the first attempt.

        Returns:
            The :class:`Worktree`; run the session's tools in ``.workspace``.

        Raises:
            WorkspaceUnavailableError: ``repo`` is missing on this worker, is not
                a git working tree, or (base None) has no commits.
            ConfigError: bad session id, ``base`` names no commit, or the
                worktree root lies inside the working tree.
            WorktreeUnavailableError: git kept failing after ``retries``
                retries (the branch, if it held no work, was deleted), the
                branch holds commits not descending from the base, the base
                differs from the recorded one, or the branch is checked out in
                the main working tree.
        """
        info = open_repository(repo)
        path = worktree_path(info, session_id, self.root)
        wanted = resolve_base(info, base) if base is not None else None

        def attempt() -> Worktree:
            with self._lock(info):
                return attempts.create(info, session_id, path, wanted, self._on_branch_created)

        try:
            return self._retrying(attempt, what=f"create the worktree of session {session_id}")
        except _RetriesExhausted:
            self._abandon(info, session_id, path)
            raise

    def _abandon(self, info: Repository, sid: str, path: Path) -> None:
        try:
            with self._lock(info):
                attempts.abandon(info, sid, path)
        except (GitCommandError, OSError, WorktreeUnavailableError) as exc:
            # orphans() lists what is left; a sweeper can discard it later.
            log.warning("could not clean up after session %s's worktree failed: %s", sid, exc)

    # -- ending -------------------------------------------------------------

    def finish(self, worktree: Worktree, *, message: str, keep: bool | None = None) -> str | None:
        """Commit everything the session left in its worktree on its branch; remove the worktree.

        ``git add -A`` then one commit by the fixed identity ``nahida-workers
        <nahida-workers@localhost>`` (works with no git config; hooks skipped;
        a ``Nahida-Session: <id>`` trailer), then the worktree is removed
        unless ``keep``.  The branch always stays: it holds the result.

        Idempotent: a second call, or a call after a crash anywhere in the
        first, commits what is still uncommitted, completes the removal, and
        returns the same value.  The commit runs outside the repository lock
        (it touches only the session's own index and branch, so sessions
        commit in parallel; a ``git commit`` orphaned by a crash holds the
        index lock, and the next call retries until it is done); the removal
        holds the repository lock.

        Args:
            worktree: from :meth:`ensure` (or :meth:`Worktree.from_dict`).
            message: the commit message (its first line a summary).
            keep: keep the worktree directory; None = the manager's ``keep``.

        Returns:
            The branch's commit (40 hex digits) when the branch holds anything
            beyond its base (the commit just made, or an earlier one: the
            session's result, evidence for its receipt), None when the session
            changed nothing (or its branch was discarded).

        Raises:
            WorkspaceUnavailableError: the repository is not reachable here.
            WorktreeUnavailableError: git kept failing after the retries, or the
                worktree's HEAD left the session branch (nothing is removed then).
        """
        keep = self.keep if keep is None else keep
        info = open_repository(worktree.repo)
        ref = _HEADS + worktree.branch
        text = f"{message.strip() or 'Session result'}\n\nNahida-Session: {worktree.session_id}\n"

        def once() -> None:
            with self._lock(info):
                mine = attempts.entries_of(info, worktree)
            for entry in mine:
                if not ops.is_healthy(entry) or entry.path in (info.main_root, info.toplevel):
                    continue
                if entry.branch != ref:
                    raise WorktreeUnavailableError(
                        f"the worktree {entry.path} is on {entry.branch or 'a detached HEAD'}, "
                        f"not on {worktree.branch}: kept as it is"
                    )
                self._clear_stale_locks(info, entry.path, worktree.branch)
                ops.commit_all(entry.path, message=text)
            if not keep:
                with self._lock(info):
                    attempts.remove(info, mine, worktree)

        self._retrying(once, what=f"finish the worktree of session {worktree.session_id}")
        tip = ops.read_ref(info, ref)
        return tip if tip is not None and tip != worktree.base else None

    def _clear_stale_locks(self, info: Repository, path: Path, branch: str) -> None:
        admin = Path(git(path, "rev-parse", "--absolute-git-dir").stdout.strip())
        for lock in (admin / "index.lock", admin / "HEAD.lock"):
            ops.remove_stale_lock(lock, older_than_s=self.stale_lock_s)
        ref_lock = info.common_dir / (_HEADS + branch + ".lock")
        ops.remove_stale_lock(ref_lock, older_than_s=self.stale_lock_s)

    def discard(
        self, repo: Path, session_id: str, *, unless: Callable[[], bool] | None = None
    ) -> bool:
        """Throw a session's worktree away: remove the worktree, delete its branch and base ref.

        For a session that failed to get its worktree or whose work must not
        be kept.  Uncommitted and committed work of the session is lost.
        Idempotent: discarding an unknown or discarded session does nothing.

        Args:
            unless: asked under the repository lock, just before anything is
                deleted; True keeps everything (``nahida worktrees prune``
                asks the ledger whether the session is live: a session that
                starts takes the same lock to make its worktree, so the
                answer cannot go stale before the deletion).

        Returns:
            False when ``unless`` said to keep it, else True.

        Raises:
            WorkspaceUnavailableError: ``repo`` is not a reachable git working tree.
            WorktreeUnavailableError: git kept failing after the retries, or the
                branch is checked out in the main working tree (nothing deleted).
        """
        info = open_repository(repo)
        path = worktree_path(info, session_id, self.root)

        def once() -> bool:
            with self._lock(info):
                if unless is not None and unless():
                    return False
                attempts.discard(info, session_id, path)
                return True

        return self._retrying(once, what=f"discard the worktree of session {session_id}")

    # -- plumbing -----------------------------------------------------------

    @contextmanager
    def _lock(self, info: Repository) -> Iterator[None]:
        with repository_lock(info.common_dir, timeout_s=self.lock_timeout_s, sleep=self._sleep):
            yield

    def _retrying(self, fn: Callable[[], T], *, what: str) -> T:
        """Run ``fn``; retry git and OS failures at most ``retries`` times with backoff.

        Raises:
            WorktreeUnavailableError: the retries ran out (the last failure chained).
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((GitCommandError, OSError)),
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, max=self.backoff_s * 8)
            + tenacity.wait_random(0, self.backoff_s),
            sleep=self._sleep,
            before_sleep=lambda state: self._retrying_after(state, what),
            reraise=True,
        )
        try:
            return retrying(fn)
        except (GitCommandError, OSError) as exc:
            message = f"could not {what} after {self.retries} retries: {exc}"
            raise _RetriesExhausted(message) from exc

    def _retrying_after(self, state: tenacity.RetryCallState, what: str) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("retrying to %s (attempt %d failed): %s", what, state.attempt_number, error)
        if self._on_retry is not None and error is not None:
            self._on_retry(error)


class _RetriesExhausted(WorktreeUnavailableError):
    """The bounded retries ran out (as opposed to a refusal no retry could change)."""
