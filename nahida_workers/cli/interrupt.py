"""Ctrl-C (and an embedded ``--timeout``) in ``nahida batch``.

The first Ctrl-C fences the sessions still in flight in the embedded mode
(their fencing epoch is bumped, DESIGN.md section 4: the worker threads
cannot write one more row), closes the spawn gate and kills every process
this one started (:mod:`nahida_workers.tools.processes`: Bash commands by
group and pid, whatever instant the signal lands), counts the finished
sessions, prints how to resume and exits 130 -- the embedded mode with
``os._exit`` instead of waiting for worker threads.  The in-flight sessions
stay ``running`` in the ledger with no owner: ``--resume`` dispatches them
again and recovery settles their open tool calls (``interrupted, outcome
unknown`` unless a receipt says otherwise).  A second Ctrl-C meanwhile kills
the children and exits at once.  An embedded batch whose ``--timeout``
passed leaves the same way (:func:`stop_in_flight`, then :func:`exit_now`
after its report), as promptly and as quietly.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from rich.console import Console

from nahida_workers.cli.exits import ExitCode
from nahida_workers.core.events import SessionStatus
from nahida_workers.tools.processes import PROCESSES

__all__ = ["exit_now", "kill_children", "run_interruptible", "stop_in_flight"]


def kill_children(*, hold: bool = False) -> int:
    """Stop every process this CLI started, for good; returns how many kills landed.

    Closes the spawn gate of :data:`~nahida_workers.tools.processes.PROCESSES`
    (no Bash command starts after this), kills the registered Bash commands by
    process group and by pid, and every other descendant of this process by
    pid, re-scanning /proc until none is alive (about 1.5 s at most).
    ``hold``: the process exits next without fencing its sessions, so the
    tool threads must not report the kills (``ChildProcesses.hold_if_exiting``).
    """
    return PROCESSES.stop_all(everything=True, hold=hold)


def _exit_now() -> None:
    kill_children(hold=True)  # the first press may not have fenced anything yet
    sys.stderr.write("interrupted again: exiting now\n")
    sys.stderr.flush()
    os._exit(ExitCode.INTERRUPTED)


class _Presses:
    """SIGINT handler: the first press raises KeyboardInterrupt, any later one exits at once.

    Installed for the whole batch, so a second press is honoured even while
    the first is still unwinding (a live progress display closing, a read).
    """

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _signum: int, _frame: Any) -> None:
        self.count += 1
        if self.count > 1:
            _exit_now()
        raise KeyboardInterrupt


def stop_in_flight(fleet: Any, batch_id: str, *, fence: bool) -> list[Any]:
    """Stop taking sessions, fence the running ones (if ``fence``), kill the children.

    In this order: the spawn gate closes first, so the embedded worker takes
    no new session from here on (one taken now would run with its tools
    refused and could end ``completed`` with its work never done); the
    sessions in flight are fenced, so a worker thread whose Bash command is
    killed cannot record the kill as the command's result -- recovery settles
    the call on resume (DESIGN.md section 4); then every child is killed, and
    a session that a worker thread took between the gate and the first fence
    is fenced too.  Returns the sessions that were in flight.
    """
    PROCESSES.close()
    if fence:
        # The fenced worker threads of this stopping process would log their
        # lost leases and killed commands after the one line the user reads.
        logging.disable(logging.WARNING)
    statuses = [SessionStatus.RUNNING, SessionStatus.WAITING]
    in_flight = {
        s.session_id: s for s in fleet.ledger.sessions(batch_id=batch_id, statuses=statuses)
    }
    if fence:
        _fence(fleet, in_flight)
    kill_children()
    if fence:
        late = fleet.ledger.sessions(batch_id=batch_id, statuses=statuses)
        _fence(fleet, {s.session_id: s for s in late if s.session_id not in in_flight})
        in_flight.update((s.session_id, s) for s in late)
    return list(in_flight.values())


def _fence(fleet: Any, sessions: dict[str, Any]) -> None:
    """Bump each session's fencing epoch: its current owner can write no more rows."""
    now = fleet.clock.now()
    for session_id in sessions:
        fleet.ledger.bump_epoch(session_id, at=now)


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
    presses = _Presses()
    previous = signal.signal(signal.SIGINT, presses)
    try:
        return work()
    except KeyboardInterrupt:
        presses.count = max(presses.count, 1)  # a KeyboardInterrupt from elsewhere counts too
    finally:
        if presses.count == 0:
            signal.signal(signal.SIGINT, previous)
    in_flight = stop_in_flight(fleet, batch_id, fence=local)
    finished = fleet.ledger.sessions(batch_id=batch_id, statuses=[SessionStatus.DONE])
    done = sum(1 for s in finished if s.parent_id is None)  # children are not repositories
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
        err.file.flush()
        exit_now(ExitCode.INTERRUPTED)  # worker threads are fenced; do not wait for them
    return ExitCode.INTERRUPTED


def exit_now(code: int) -> NoReturn:
    """Flush the output and leave the process at once with ``code``.

    The embedded worker's threads are fenced (:func:`stop_in_flight`) and
    their children killed: waiting for Celery's worker shutdown would only
    add seconds and its log lines after the last message the user reads.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
