"""Ctrl-C in ``nahida batch`` (issue 16 item 6).

The first Ctrl-C kills the process group of every child this process started
(Bash tool commands run in their own group, ``start_new_session``), fences
the sessions still in flight in the embedded mode (their fencing epoch is
bumped, DESIGN.md section 4: the worker threads cannot write one more row),
counts the finished sessions, prints how to resume and exits 130 -- the
embedded mode with ``os._exit`` instead of waiting for worker threads.  The
in-flight sessions stay ``running`` in the ledger with no owner: ``--resume``
dispatches them again and recovery settles their open tool calls
(``interrupted, outcome unknown`` unless a receipt says otherwise).  A second
Ctrl-C meanwhile kills the child groups and exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from nahida_workers.cli.exits import ExitCode
from nahida_workers.core.events import SessionStatus

__all__ = ["child_process_groups", "kill_child_groups", "run_interruptible"]


def child_process_groups() -> set[int]:
    """Process groups of this process's children other than our own group (Linux /proc)."""
    me, own_group = os.getpid(), os.getpgrp()
    groups: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[1]) == me and int(fields[2]) != own_group:
            groups.add(int(fields[2]))
    return groups


def kill_child_groups() -> int:
    """SIGKILL every child process group (see :func:`child_process_groups`); returns how many."""
    killed = 0
    for group in child_process_groups():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
            killed += 1
    return killed


def _exit_now(_signum: int, _frame: Any) -> None:
    kill_child_groups()
    sys.stderr.write("interrupted again: exiting now\n")
    sys.stderr.flush()
    os._exit(ExitCode.INTERRUPTED)


def run_interruptible(
    work: Callable[[], int],
    *,
    fleet: Any,
    batch_id: str,
    total: int,
    local: bool,
    err: Console,
) -> int:
    """``work()``, or on Ctrl-C the interrupt handling above; returns an exit code."""
    try:
        return work()
    except KeyboardInterrupt:
        pass
    signal.signal(signal.SIGINT, _exit_now)
    kill_child_groups()
    ledger, now = fleet.ledger, fleet.clock.now()
    in_flight = ledger.sessions(
        batch_id=batch_id, statuses=[SessionStatus.RUNNING, SessionStatus.WAITING]
    )
    if local:
        for session in in_flight:
            ledger.bump_epoch(session.session_id, at=now)  # fence the worker threads
    done = len(ledger.sessions(batch_id=batch_id, statuses=[SessionStatus.DONE]))
    left = (
        f"{len(in_flight)} in flight interrupted (resumable)"
        if local
        else f"{len(in_flight)} still running on the fleet"
    )
    err.print(
        f"interrupted: {done}/{total} sessions done, {left}; nothing is lost -- run the same "
        f"command with --resume {batch_id} to finish the rest",
        markup=False,
    )
    if local:
        sys.stdout.flush()
        sys.stderr.flush()
        err.file.flush()
        os._exit(ExitCode.INTERRUPTED)  # worker threads are fenced; do not wait for them
    return ExitCode.INTERRUPTED
