"""The per-repository worktree lock: ``flock`` on a file in the git common dir (case B22).

Concurrent ``git worktree add`` on one repository race on ``.git/config.lock``
and on half-written ``.git/worktrees/<name>/`` entries (B22's probe on this
machine: 10 of 24 adds failed, each leaving a branch without a worktree).  Every
worktree change the launcher makes in a repository holds this lock.

Why a file lock and not an in-process mutex: the sessions asking for worktrees
run in different worker processes (two parents on two prefork workers in B22).
Why ``flock`` and not ``fcntl`` record locks: ``flock`` belongs to the open file
description, so two threads of one process that each open the file also
exclude each other, and the kernel releases it when its holder dies, even by
SIGKILL: a crashed launcher never leaves the repository locked.

The git commands run under the lock inherit its file descriptor (see
:func:`held_fds`): when the launcher is SIGKILLed while its ``git worktree
add`` runs, that git, now an orphan, keeps the lock until it exits, so the
next attempt (a redelivered session) never works on a half-made worktree that
is still being written.

Threads of one process also take a per-repository mutex first: on
filesystems where ``flock`` is emulated with POSIX record locks (the Linux NFS
client), locks belong to the process, and two of its threads would not
exclude each other through the file alone.

Assumption: one host, or a shared filesystem whose ``flock`` every worker that
mounts it honours (local filesystems do; NFS does through POSIX locks, which
an orphaned git does not inherit; some FUSE filesystems do not lock at all).
The lock file sits in the git *common* dir, which every linked worktree of the
repository shares.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from nahida_workers.errors import WorktreeUnavailableError

__all__ = ["LOCK_FILE_NAME", "held_fds", "repository_lock"]

#: Name of the lock file inside the repository's git common dir.
LOCK_FILE_NAME = "nahida-worktrees.lock"

_FIRST_POLL_S = 0.002
_MAX_POLL_S = 0.05
_held = threading.local()
_mutexes: dict[Path, threading.Lock] = {}
_mutexes_guard = threading.Lock()


def _mutex(common_dir: Path) -> threading.Lock:
    with _mutexes_guard:
        return _mutexes.setdefault(common_dir.resolve(), threading.Lock())


def held_fds() -> tuple[int, ...]:
    """Descriptors of the repository locks this thread holds, for its git children to inherit.

    An explicit unlock at the end of the ``with`` releases the lock for every
    holder of the descriptor; only a holder that dies without unlocking
    leaves it to its children.
    """
    return tuple(getattr(_held, "fds", ()))


@contextlib.contextmanager
def repository_lock(
    common_dir: Path,
    *,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold the exclusive worktree lock of one repository for the ``with`` body.

    Args:
        common_dir: the repository's git common dir (``git rev-parse
            --git-common-dir``, absolute), shared by all its worktrees.
        timeout_s: longest wait in seconds; a holder stuck that long (a hung
            git, a SIGSTOPped worker) makes this attempt fail instead of
            waiting for ever.
        sleep: the pause between polls (seconds); tests may pass their own.

    Raises:
        WorktreeUnavailableError: the lock file cannot be opened (read-only git
            dir) or the lock was not free within ``timeout_s``.
    """
    path = common_dir / LOCK_FILE_NAME
    deadline = time.monotonic() + timeout_s
    mutex = _mutex(common_dir)
    if not mutex.acquire(timeout=timeout_s):
        raise WorktreeUnavailableError(
            f"the worktree lock {path} was held for more than {timeout_s} s"
        )
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise WorktreeUnavailableError(f"cannot open the worktree lock {path}: {exc}") from exc
        try:
            _acquire(fd, path, deadline, timeout_s, sleep)
            _held.fds = (*held_fds(), fd)
            try:
                yield
            finally:
                _held.fds = tuple(f for f in held_fds() if f != fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        mutex.release()


def _acquire(
    fd: int, path: Path, deadline: float, timeout_s: float, sleep: Callable[[float], None]
) -> None:
    # Polling with LOCK_NB rather than a blocking flock: a blocking call cannot
    # time out without signals, and signals are not ours to take in a worker.
    pause = _FIRST_POLL_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WorktreeUnavailableError(
                    f"the worktree lock {path} was held for more than {timeout_s} s"
                ) from None
            sleep(pause)
            pause = min(pause * 2, _MAX_POLL_S)
