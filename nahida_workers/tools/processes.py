"""Every process the tools start, and the gate that stops them all at once.

After Ctrl-C in ``nahida batch --local`` no process the
batch started may outlive it, whatever instant the signal lands.  A single
scan of /proc is not enough: a child between ``fork`` and ``setsid`` still
shares our process group (a group kill skips it), and a worker thread whose
turn is already committed can start a command after the scan (fencing only
blocks ledger writes).  So:

* :meth:`ChildProcesses.spawn` passes a gate under a lock before it starts a
  process, and registers the child under the same lock afterwards; a child
  whose spawn finished after :meth:`ChildProcesses.stop_all` began is killed
  at once and the call refused.
* :meth:`ChildProcesses.stop_all` closes the gate, waits (bounded) for the
  spawns already past it, kills every registered child by process group AND
  by pid, then re-scans /proc and kills descendants until none is alive or
  the bound passes.  With ``everything`` (the CLI process, which owns all of
  its children) it first becomes a child subreaper (Linux ``prctl``), so a
  grandchild orphaned by a kill is re-parented to us and found by the scan.
* a stop that no fence preceded (a second Ctrl-C: ``stop_all(hold=True)``,
  then ``os._exit``) makes every tool thread whose command ended report
  nothing for :data:`HOLD_S` (:meth:`ChildProcesses.hold_if_exiting`): the
  kill must never be recorded as the command's result; recovery settles the
  call on resume.  After a fenced stop the thread reports at once (its
  commit is refused by the fence) so the embedded worker can shut down.

``PROCESSES`` is the one registry of the process; tests make their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from nahida_workers.errors import ToolError

__all__ = ["HOLD_S", "PROCESSES", "STOPPING_CODE", "ChildProcesses", "descendants"]

#: ToolError code of a command refused (or killed at birth) while stopping.
STOPPING_CODE = "stopping"

#: Seconds :meth:`ChildProcesses.stop_all` waits for spawns already past the gate.
SPAWN_WAIT_S = 0.5

#: Seconds :meth:`ChildProcesses.stop_all` keeps re-scanning for live descendants.
RESCAN_S = 1.0

#: Seconds a tool thread holds its result once the gate closed (the CLI exits within it).
HOLD_S = 30.0

_PR_SET_CHILD_SUBREAPER = 36


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """``pid -> (ppid, pgrp, state)`` for every process in /proc (Linux)."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2:
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def descendants(roots: Iterable[int], table: dict[int, tuple[int, int, str]]) -> set[int]:
    """The live (not zombie) processes of ``table`` below ``roots``, the live roots included."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _group, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return {pid for pid in found if pid in table and table[pid][2] not in ("Z", "X")}


def _become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process from now on (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _kill(pid: int, *, group: bool) -> bool:
    """SIGKILL ``pid`` (its group when ``group``); False when there was nothing to kill."""
    try:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class ChildProcesses:
    """The children tools started, behind a gate that :meth:`stop_all` closes for good.

    Args:
        popen: the process factory (``subprocess.Popen``; a seam for tests).
    """

    def __init__(
        self,
        *,
        popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
        hold_s: float = HOLD_S,
    ) -> None:
        self.popen = popen
        self.hold_s = hold_s
        self._holding = False  # a stop_all(hold=True): the process exits unfenced
        self._cond = threading.Condition(threading.RLock())  # RLock: a signal handler re-enters
        self._stopping = False
        self._spawning: set[int] = set()  # threads past the gate, not yet registered
        self._live: set[int] = set()  # pids (= process group ids: new sessions)

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop_all` has begun; no process starts after that."""
        return self._stopping

    @property
    def live(self) -> frozenset[int]:
        """Pids (= process group ids) of the processes started and not yet forgotten."""
        with self._cond:
            return frozenset(self._live)

    def close(self) -> None:
        """Close the gate for good without killing anything yet (:meth:`stop_all` kills).

        From here on :attr:`stopping` is true: no process starts, and the
        embedded worker takes no new session (``celery/sessions.py``).
        """
        with self._cond:
            self._stopping = True

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new session (``popen(argv, start_new_session=True, **kwargs)``).

        The caller must :meth:`forget` the pid once it has reaped the process.

        Raises:
            ToolError: code ``stopping`` when :meth:`stop_all` has begun (the
                process never started, or was killed and reaped at birth).
            OSError: from ``popen``.
        """
        me = threading.get_ident()
        with self._cond:
            if self._stopping:
                raise ToolError("not started: this process is stopping", code=STOPPING_CODE)
            self._spawning.add(me)
        try:
            proc = self.popen(argv, start_new_session=True, **kwargs)
        finally:
            with self._cond:
                self._spawning.discard(me)
                self._cond.notify_all()
        with self._cond:
            late = self._stopping
            if not late:
                self._live.add(proc.pid)
        if late:
            _kill(proc.pid, group=True)
            _kill(proc.pid, group=False)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            raise ToolError("killed at start: this process is stopping", code=STOPPING_CODE)
        return proc

    def hold_if_exiting(self) -> None:
        """After ``stop_all(hold=True)``, block the calling tool thread, then refuse.

        Its command was killed (or ended) because this process is exiting
        with no session fenced: whatever it would report is not the
        command's outcome, and the process exits within :attr:`hold_s`
        seconds, so nothing is recorded.

        Raises:
            ToolError: code ``stopping``, if the process is still alive after
                :attr:`hold_s` seconds.
        """
        if not self._holding:
            return
        time.sleep(self.hold_s)
        raise ToolError("killed: this process is stopping", code=STOPPING_CODE)

    def forget(self, pid: int) -> None:
        """Drop ``pid`` from the registry (after the caller reaped it)."""
        with self._cond:
            self._live.discard(pid)

    def stop_all(
        self,
        *,
        everything: bool = False,
        hold: bool = False,
        spawn_wait_s: float = SPAWN_WAIT_S,
        rescan_s: float = RESCAN_S,
    ) -> int:
        """Close the gate for good and kill every child; returns how many kills landed.

        Args:
            everything: also kill every other descendant of this process (the
                CLI, which owns all of its children); otherwise only the
                registered children and their descendants.
            hold: the process exits next with no session fenced: tool
                threads hold what their killed commands would report
                (:meth:`hold_if_exiting`).
            spawn_wait_s: seconds to wait for spawns already past the gate
                (other threads'; the calling thread's own spawn cannot finish).
            rescan_s: seconds to keep re-scanning /proc for live descendants.
        """
        if everything:
            _become_subreaper()
        me = threading.get_ident()
        with self._cond:
            self._stopping = True
            self._holding = self._holding or hold  # before any kill: no thread reports it
            self._cond.wait_for(lambda: not (self._spawning - {me}), timeout=spawn_wait_s)
            registered = set(self._live)
        own_pid, own_group = os.getpid(), os.getpgrp()
        roots = registered | ({own_pid} if everything else set())
        killed, deadline = 0, time.monotonic() + rescan_s
        while True:
            table = _proc_table()
            alive = descendants(roots, table) - {own_pid}
            for pid in registered & alive:
                if table[pid][1] != own_group:  # never our own group
                    killed += _kill(table[pid][1], group=True)
            for pid in alive:
                killed += _kill(pid, group=False)
            if not alive or time.monotonic() >= deadline:
                return killed
            time.sleep(0.005)  # let the kernel deliver; re-scan for forks that raced the kill


#: The process-wide registry the Bash tool spawns through.
PROCESSES = ChildProcesses()
