"""The spawn gate and the kill of every child (issue 16 item 6), whatever instant it lands.

The interrupt is fired exactly at the racy instants through the registry's
``popen`` seam: between the gate and the fork, and with the child still in
our own process group (the moment between fork and setsid).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.errors import ToolError
from nahida_workers.testing.fleet import marked_processes, wait_for
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.processes import STOPPING_CODE, ChildProcesses

Popen = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def marker() -> Any:
    """A unique marker; whatever still carries it at the end is killed (no debris)."""
    mark = f"nahida-children-{uuid.uuid4().hex[:8]}"
    yield mark
    for pid in marked_processes(mark):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def _sleep(marker: str) -> dict[str, str]:
    return {"command": f"sleep 300 # {marker}"}


def test_a_bash_requested_after_the_interrupt_began_never_starts(
    ctx: ToolContext, marker: str
) -> None:
    calls: list[Any] = []

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        calls.append(args)
        return subprocess.Popen(*args, **kwargs)

    registry = ChildProcesses(popen=popen)
    registry.stop_all()
    with pytest.raises(ToolError) as caught:
        Bash(timeout_s=30.0, processes=registry).execute(_sleep(marker), ctx)
    assert caught.value.code == STOPPING_CODE
    assert calls == [] and marked_processes(marker) == []


def _fire_then_fork(fire: Callable[[], Any]) -> Popen:
    """A ``popen`` that runs ``fire`` after the gate let it through, then forks."""

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        fire()
        return subprocess.Popen(*args, **kwargs)

    return popen


def test_an_interrupt_between_the_gate_and_the_fork_kills_the_child_at_birth(
    ctx: ToolContext, marker: str
) -> None:
    """Another thread (the signal handler's) stops while this one is past the gate."""
    stopper: list[threading.Thread] = []
    registry = ChildProcesses()

    def fire() -> None:
        stopper.append(threading.Thread(target=registry.stop_all))
        stopper[0].start()
        wait_for(lambda: registry.stopping, timeout=10, what="the interrupt to begin")

    registry.popen = _fire_then_fork(fire)
    with pytest.raises(ToolError) as caught:
        Bash(timeout_s=30.0, processes=registry).execute(_sleep(marker), ctx)
    stopper[0].join()
    assert caught.value.code == STOPPING_CODE
    assert marked_processes(marker) == [], "a Bash started during the interrupt outlived it"


def test_an_interrupt_landing_in_the_spawning_thread_itself_kills_the_child(
    ctx: ToolContext, marker: str
) -> None:
    """The signal handler runs in the thread that is spawning: no wait for itself."""
    registry = ChildProcesses()
    registry.popen = _fire_then_fork(registry.stop_all)
    with pytest.raises(ToolError) as caught:
        Bash(timeout_s=30.0, processes=registry).execute(_sleep(marker), ctx)
    assert caught.value.code == STOPPING_CODE
    assert marked_processes(marker) == []


def test_a_child_still_in_our_process_group_is_killed_by_pid(marker: str) -> None:
    """Between fork and setsid the child shares our group: a group kill must skip
    the group (it is ours) and the pid kill must still land."""

    def no_setsid(*args: Any, start_new_session: bool, **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(*args, **kwargs)

    registry = ChildProcesses(popen=no_setsid)
    proc = registry.spawn(["/bin/sh", "-c", f"sleep 300 # {marker}"])
    assert os.getpgid(proc.pid) == os.getpgrp()
    registry.stop_all()
    assert proc.wait(timeout=30) == -9
    assert marked_processes(marker) == []


def test_a_grandchild_that_left_the_group_is_killed_too(tmp_path: Path, marker: str) -> None:
    registry = ChildProcesses()
    ready = tmp_path / "ready"
    script = f"setsid /bin/sh -c 'sleep 300; : {marker}' &\ntouch {ready}\nwait"
    proc = registry.spawn(["/bin/bash", "-c", script])
    wait_for(
        lambda: ready.exists() and len(marked_processes(marker)) >= 2, timeout=10, what="the escape"
    )
    registry.stop_all()
    proc.wait(timeout=30)
    assert marked_processes(marker) == [], "a grandchild in its own session outlived the stop"


def test_the_cli_kill_closes_the_gate_of_the_process_and_kills_everything(
    tmp_path: Path, marker: str
) -> None:
    """``kill_children`` in a process of its own (it kills all of that process's
    descendants): fired between the gate and the fork of a Bash call, and with
    an unregistered child of the process alive."""
    probe = textwrap.dedent(
        f"""
        import subprocess, sys
        from pathlib import Path
        from nahida_workers.cli.interrupt import kill_children
        from nahida_workers.errors import ToolError
        from nahida_workers.tools.base import ToolContext
        from nahida_workers.tools.bash import Bash
        from nahida_workers.tools.processes import PROCESSES

        other = subprocess.Popen(["/bin/sh", "-c", "sleep 300 # {marker}"])
        def popen(*args, **kwargs):
            kill_children()
            return subprocess.Popen(*args, **kwargs)
        PROCESSES.popen = popen
        ctx = ToolContext(workspace=Path({str(tmp_path)!r}), run_id="r", call_id="c",
                          idempotency_key="r:c")
        try:
            Bash(timeout_s=30.0).execute({{"command": "sleep 300 # {marker}"}}, ctx)
        except ToolError as exc:
            print(exc.code)
        print(other.wait(timeout=30))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [STOPPING_CODE, "-9"]
    assert marked_processes(marker) == []


def test_a_command_killed_by_the_stop_reports_no_result(ctx: ToolContext, marker: str) -> None:
    """No fence may come first (a second Ctrl-C): the killed command's thread
    reports nothing while the process exits, so the kill is never recorded as
    the command's result (without the hold it returned the kill as an exit code at once)."""
    registry = ChildProcesses(hold_s=1.0)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["outcome"] = Bash(timeout_s=30.0, processes=registry).execute(_sleep(marker), ctx)
        except ToolError as exc:
            box["error"] = exc
        box["at"] = time.monotonic()

    thread = threading.Thread(target=call)
    thread.start()
    wait_for(lambda: marked_processes(marker), timeout=10, what="the command to start")
    registry.stop_all(hold=True)  # as a second Ctrl-C stops: no fence before, exit after
    killed_at = time.monotonic()
    thread.join(timeout=30)
    assert "outcome" not in box, box
    assert box["error"].code == STOPPING_CODE
    assert box["at"] - killed_at >= 0.9  # held: the CLI's os._exit comes well before
    assert marked_processes(marker) == []


def test_after_a_fenced_stop_the_killed_command_reports_at_once(
    ctx: ToolContext, marker: str
) -> None:
    """The timeout and the first Ctrl-C fence first: the thread returns (its commit
    is refused) and the embedded worker can shut down without waiting."""
    registry = ChildProcesses(hold_s=30.0)
    box: dict[str, Any] = {}

    def call() -> None:
        box["outcome"] = Bash(timeout_s=30.0, processes=registry).execute(_sleep(marker), ctx)

    thread = threading.Thread(target=call)
    thread.start()
    # started AND registered: a stop between the fork and the registration is the
    # "killed at start" path, tested on its own above
    wait_for(lambda: marked_processes(marker) and registry.live, timeout=10,
             what="the command to start")  # fmt: skip
    registry.stop_all()
    thread.join(timeout=10)
    assert not thread.is_alive() and box["outcome"].evidence["error_code"] == "nonzero_exit"
