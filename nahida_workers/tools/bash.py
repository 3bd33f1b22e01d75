"""Bash: run a shell command in the workspace, in a sandbox, in its own process group.

DESIGN.md section 5: Bash runs in the workspace with a timeout, a bounded
output capture and a process group that is killed whole, inside a sandbox
(:mod:`nahida_workers.tools.sandbox`: own PID and mount namespaces, the
workspace read-write and the rest read-only, no network unless the job
allows it).  The command gets a minimal environment, never the worker's own
(which holds provider keys and database URLs).  Processes the command leaves
behind (``cmd &``, even ``setsid cmd &``) are killed when it ends: the group
kill takes bwrap, and the PID namespace dies with it; nothing outlives the call.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.errors import ConfigError, ToolError
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.output_bytes import printable
from nahida_workers.tools.processes import PROCESSES, ChildProcesses
from nahida_workers.tools.sandbox import Sandbox
from nahida_workers.tools.workspace import BoundedCapture

__all__ = ["Bash"]

#: Seconds between SIGTERM and SIGKILL when the command must be stopped.
DEFAULT_KILL_GRACE_S = 2.0

#: Extra seconds in ``spec.timeout_s`` over the command timeout, so the
#: executor's outer limit never fires before the tool's own kill and report.
_SPEC_MARGIN_S = 10.0

#: Seconds to wait for the pipes to reach EOF once the group is dead; only a
#: process that escaped the group (``setsid``) can hold them longer.
_DRAIN_S = 2.0

_READ_CHUNK = 64 * 1024
_HEAD_CHARS = 200


def _pump(
    fd: int,
    capture: BoundedCapture,
    stop: threading.Event,
    live: Callable[[bytes], None] | None = None,
) -> None:
    """Read ``fd`` to EOF into ``capture`` (and ``live``); give up when ``stop`` is set."""
    poller = select.poll()  # poll, not select: worker fds may exceed FD_SETSIZE
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while not stop.is_set():
        if not poller.poll(50):
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return
        capture.feed(chunk)
        if live is not None:
            live(chunk)


def _has_exited(pid: int) -> bool:
    """True once ``pid`` has exited, WITHOUT reaping it.

    Leaving the zombie in place keeps its pid (= the group id) from being
    reused, so the killpg that follows can only hit our own group.
    """
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # someone else's waitpid(-1) reaped it: it has exited
        return True
    return result is not None


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty


class Bash(Tool):
    """Run ``/bin/bash -c command`` in the workspace.

    Arguments: ``{"command": str, "timeout"?: seconds, at most timeout_s}``.

    The command runs inside ``sandbox`` (bwrap, unless the operator set
    ``NAHIDA_SANDBOX=none``) with cwd = the workspace, stdin from /dev/null,
    in a new session (its own process group), with only PATH, HOME, LANG,
    LC_ALL, TERM, PAGER, GIT_PAGER, the sandbox's passed variables
    (``NAHIDA_SANDBOX_ENV``) and ``ctx.env`` in its environment.  stdout and
    stderr are each captured into at most ``max_capture_bytes`` bytes (head
    and tail kept), so memory stays bounded whatever the command prints.  On
    timeout or ``ctx.cancel`` the whole group gets SIGTERM, then SIGKILL after
    ``kill_grace_s``; it is reaped before the call returns.

    Outcome status: ``ok`` for exit code 0, ``error`` (code
    ``nonzero_exit``) otherwise, ``timed_out`` or ``cancelled``.  Evidence:
    ``command``, ``exit_code`` (None when killed by the tool; negative N if
    the shell itself died of signal N), ``stdout_bytes``, ``stderr_bytes``,
    ``stdout_head`` (first 200 characters), ``stdout_sha256``,
    ``stderr_sha256`` (of the full streams), ``stdout_binary`` and
    ``stderr_binary`` (the stream is not text: the result shows a byte
    summary -- size, sha256, type, hex preview -- instead of decoded bytes,
    and ``stdout_head`` is its printable ASCII), ``duration_ms``, ``timed_out``,
    ``sandbox`` (``bwrap`` or ``none``: the command ran unsandboxed).  In the
    sandbox a shell killed by signal N exits 128+N (bwrap reports it so).
    """

    def __init__(
        self,
        *,
        timeout_s: float = 120.0,
        max_capture_bytes: int = 1 << 20,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
        path: str | None = None,
        home: str | None = None,
        processes: ChildProcesses | None = None,
        sandbox: Sandbox | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> None:
        """Configure the tool.

        Args:
            timeout_s: the longest a command may run, in seconds (also the
                default when the model gives no ``timeout``).
            max_capture_bytes: bytes kept per stream (half head, half tail).
            kill_grace_s: seconds between SIGTERM and SIGKILL.
            path: PATH for commands; default the worker's PATH at construction.
            home: HOME for commands; default the worker user's home.
            processes: the registry commands start through (its gate refuses
                new commands once a Ctrl-C began); default the process-wide one.
            sandbox: how commands are confined; default bwrap, no network
                (the worker builds it from settings and the job's ``network``).
            on_output: called with ``("stdout" | "stderr", chunk)`` for every
                chunk read, on the reader threads, as it arrives (``nahida
                shell`` shows output live; the capture stays bounded).

        Raises:
            ConfigError: a non-positive timeout or capture size.
        """
        if timeout_s <= 0 or max_capture_bytes <= 0 or kill_grace_s < 0:
            raise ConfigError("Bash needs timeout_s > 0, max_capture_bytes > 0, kill_grace_s >= 0")
        self.timeout_s = timeout_s
        self.max_capture_bytes = max_capture_bytes
        self.kill_grace_s = kill_grace_s
        self._path = path if path is not None else os.environ.get("PATH", os.defpath)
        self._home = home if home is not None else os.path.expanduser("~")
        self._processes = processes if processes is not None else PROCESSES
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.on_output = on_output
        self.spec = ToolSpec(
            name="Bash",
            description=(
                "Run a bash command in the workspace directory (non-interactive: stdin is "
                "empty). Returns the exit code, stdout and stderr; long output keeps its "
                f"head and tail. Default and maximum timeout: {timeout_s:g} seconds. "
                "Background processes are killed when the command ends."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": timeout_s},
                },
                "required": ["command"],
                "additionalProperties": False,
            },
            read_only=False,
            concurrency_safe=False,
            idempotent=False,
            evidence_kind=EvidenceKind.MUTATE,
            timeout_s=timeout_s + kill_grace_s + _SPEC_MARGIN_S,
        )

    def environment(self, ctx: ToolContext) -> dict[str, str]:
        """The complete environment a command gets (nothing inherited beyond PATH)."""
        env = {
            "PATH": self._path,
            "HOME": self._home,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }
        env.update(self.sandbox.passed_environment())
        env.update(ctx.env)
        return env

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run the command; see the class docstring for arguments and evidence.

        Raises:
            ToolError: code ``workspace_missing`` when the workspace is not a
                directory; code ``stopping`` once the process is stopping (see
                :mod:`nahida_workers.tools.processes`; also, after
                a hold, when the process is exiting unfenced); code
                ``sandbox_unavailable`` when no sandbox can be made and the
                operator did not set ``NAHIDA_SANDBOX=none``.
        """
        command = str(arguments["command"])
        timeout = min(float(arguments.get("timeout", self.timeout_s)), self.timeout_s)
        if not ctx.workspace.is_dir():
            raise ToolError(
                f"workspace {ctx.workspace} is not a directory", code="workspace_missing"
            )
        argv = self.sandbox.wrap(["/bin/bash", "-c", command], workspace=ctx.workspace)
        out, err = BoundedCapture(self.max_capture_bytes), BoundedCapture(self.max_capture_bytes)
        stop = threading.Event()
        started = time.monotonic()
        proc = self._processes.spawn(  # a new session: its own process group
            argv,
            cwd=ctx.workspace,
            env=self.environment(ctx),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(target=_pump, args=(s.fileno(), c, stop, self._live(n)), daemon=True)
            for s, c, n in ((proc.stdout, out, "stdout"), (proc.stderr, err, "stderr"))
        ]
        for reader in readers:
            reader.start()
        ended = "interrupted"
        try:
            ended = self._wait(proc.pid, started + timeout, ctx.cancel)
            if ended != "exited":
                _killpg(proc.pid, signal.SIGTERM)
                self._wait(proc.pid, time.monotonic() + self.kill_grace_s, None)
        finally:
            # Always, even for a normal exit: background children die with the
            # call.  The unreaped shell still holds the group id here.
            _killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
            self._processes.forget(proc.pid)
            for reader in readers:
                reader.join(_DRAIN_S)
            stop.set()
            for reader in readers:
                reader.join()
            proc.stdout.close()
            proc.stderr.close()
        self._processes.hold_if_exiting()  # a kill by Ctrl-C is not the command's result
        duration_ms = int((time.monotonic() - started) * 1000)
        exit_code = returncode if ended == "exited" else None
        return self._outcome(command, ended, exit_code, timeout, out, err, duration_ms, ctx)

    def _live(self, stream: str) -> Callable[[bytes], None] | None:
        hook = self.on_output
        if hook is None:
            return None
        return lambda chunk: hook(stream, chunk)

    @staticmethod
    def _wait(pid: int, deadline: float, cancel: threading.Event | None) -> str:
        """Wait until the process exits (``exited``), the deadline (``timed_out``) or cancel.

        A pidfd (Linux 5.3+) wakes the wait the moment the process exits,
        without reaping it; cancel is looked at every 50 ms.  Elsewhere:
        polling with a backoff from 1 to 50 ms.
        """
        poller = select.poll()  # poll, not select: worker fds may exceed FD_SETSIZE
        try:
            pidfd = os.pidfd_open(pid)
            poller.register(pidfd, select.POLLIN)
        except (AttributeError, OSError):  # no pidfd here, or already reaped by someone else
            pidfd = -1
        try:
            delay = 0.001
            while not _has_exited(pid):
                now = time.monotonic()
                if now >= deadline:
                    return "timed_out"
                if cancel is not None and cancel.is_set():
                    return "cancelled"
                pause = min(delay if pidfd < 0 else 0.05, deadline - now)
                if pidfd >= 0:
                    poller.poll(pause * 1000)  # readable once the process exits
                elif cancel is not None:
                    cancel.wait(pause)
                else:
                    time.sleep(pause)
                delay = min(delay * 2, 0.05)
            return "exited"
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def _outcome(
        self,
        command: str,
        ended: str,
        exit_code: int | None,
        timeout: float,
        out: BoundedCapture,
        err: BoundedCapture,
        duration_ms: int,
        ctx: ToolContext,
    ) -> ToolOutcome:
        if ended == "timed_out":
            status, header = ToolStatus.TIMED_OUT, f"timed out after {timeout:g} s; killed"
        elif ended == "cancelled":
            status, header = ToolStatus.CANCELLED, "cancelled; killed"
        else:
            status = ToolStatus.OK if exit_code == 0 else ToolStatus.ERROR
            header = f"exit code: {exit_code}"
        budget = max(ctx.max_output_bytes - len(header) - 32, 0)
        out_budget, err_budget = _split(budget, out.total, err.total)
        parts = [header]
        if out.total:
            parts.append("stdout:\n" + out.render(out_budget).removesuffix("\n"))
        if err.total:
            parts.append("stderr:\n" + err.render(err_budget).removesuffix("\n"))
        if not out.total and not err.total:
            parts.append("(no output)")
        evidence: dict[str, Any] = {
            "command": command,
            "exit_code": exit_code,
            "stdout_bytes": out.total,
            "stderr_bytes": err.total,
            "stdout_head": _head_text(out),
            "stdout_binary": out.binary,
            "stderr_binary": err.binary,
            "stdout_sha256": out.hexdigest(),
            "stderr_sha256": err.hexdigest(),
            "duration_ms": duration_ms,
            "timed_out": ended == "timed_out",
            "sandbox": self.sandbox.label,
        }
        if status is not ToolStatus.OK:
            evidence["error_code"] = "nonzero_exit" if ended == "exited" else ended
        return ToolOutcome(status, "\n".join(parts), evidence)


def _head_text(capture: BoundedCapture) -> str:
    """The first :data:`_HEAD_CHARS` characters of a stream; printable ASCII when binary."""
    if capture.binary:
        return printable(bytes(capture.head[:_HEAD_CHARS]))
    return capture.head[: _HEAD_CHARS * 4].decode("utf-8", "replace")[:_HEAD_CHARS]


def _split(budget: int, out_n: int, err_n: int) -> tuple[int, int]:
    """Share ``budget`` bytes between stdout and stderr; a short stream keeps all of its."""
    half = budget // 2
    if err_n <= half:
        return budget - err_n, err_n
    if out_n <= half:
        return out_n, budget - out_n
    return budget - half, half
