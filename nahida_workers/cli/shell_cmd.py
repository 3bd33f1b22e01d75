"""``nahida shell SESSION -- CMD``: run a command in a session's workspace.

The work is :func:`nahida_workers.runtime.usershell.run_user_shell`; this
module is the terminal side: live output (bounded, binary never written
raw), Ctrl-C as a cancel that kills the command's process group, and the
exit code.
"""

import signal
import sys
import threading
from typing import Annotated, Any, BinaryIO

import typer

from nahida_workers.cli.common import JsonOpt, err, print_json
from nahida_workers.cli.exits import ExitCode, is_delivery_failure, print_error

__all__ = ["LIVE_MAX_BYTES", "TIMED_OUT_EXIT", "LiveOutput", "shell"]

#: Bytes of live output written to the terminal by default (both streams).
LIVE_MAX_BYTES = 64 * 1024
#: Exit code when the command timed out (as ``timeout(1)``).
TIMED_OUT_EXIT = 124


class LiveOutput:
    """Writes a command's output to this terminal as it arrives, within a byte budget.

    A stream whose chunk is not text stops being shown (one notice on
    stderr); its byte summary is printed at the end.  Past ``limit`` bytes
    nothing more is written (one notice); the capture is unaffected.
    Called from two reader threads: one lock.
    """

    def __init__(self, limit: int, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self.limit = limit
        self.written = 0
        self.streams = {"stdout": stdout, "stderr": stderr}
        self.binary: set[str] = set()
        self.stopped = False
        self.notes: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, stream: str, chunk: bytes) -> None:
        """Write ``chunk`` of ``stream`` (``stdout`` or ``stderr``) if it may be shown."""
        with self._lock:
            if self.stopped or stream in self.binary:
                return
            from nahida_workers.tools.output_bytes import looks_binary_output

            if looks_binary_output(chunk, cut_start=True):
                self.binary.add(stream)
                self._note(f"[nahida shell: binary output on {stream}; its summary follows]")
                return
            room = self.limit - self.written
            part = chunk[:room]
            if part:
                target = self.streams[stream]
                target.write(part)
                target.flush()
                self.written += len(part)
            if len(chunk) > room:
                self.stopped = True
                self._note(
                    f"[nahida shell: live output stopped after {self.limit} bytes; "
                    "the rest is captured (head and tail) in the record]"
                )

    def _note(self, line: str) -> None:
        self.notes.append(line)
        err = self.streams["stderr"]
        err.write(b"\n" + line.encode() + b"\n")
        err.flush()


def shell(
    session_id: Annotated[str, typer.Argument(help="The session (id or unique prefix).")],
    command: Annotated[
        list[str],
        typer.Argument(help="After `--`: shell text ('make test | tail'), or a program and args."),
    ],
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds before the command is killed (default: the job's limits.bash_timeout_s).",
        ),
    ] = None,
    live_max_bytes: Annotated[
        int, typer.Option("--live-max-bytes", min=0, help="Bytes of output shown live.")
    ] = LIVE_MAX_BYTES,
    as_json: JsonOpt = False,
) -> None:
    """Run CMD in the session's workspace and sandbox; persist the result, then queue it.

    As the session's Bash tool runs it: same workspace, same sandbox, a
    timeout, the whole process tree killed on timeout or Ctrl-C.  The result
    (exit code, bounded output; binary output as a byte summary) is recorded
    in the ledger first, then queued in the session's inbox as auxiliary
    steering: the agent sees it at its next boundary.  A done session is not
    woken.  Exits with the command's exit code; 124 when it timed out, 130
    on Ctrl-C, 4 when recorded but the broker is down.
    """
    from pathlib import Path

    from nahida_workers.cli.ids import resolve
    from nahida_workers.cli.session_cmds import _fleet
    from nahida_workers.ledger.children import child_ledger
    from nahida_workers.runtime.usershell import run_user_shell, session_workspace
    from nahida_workers.tools.registration import sandbox_for
    from nahida_workers.workspaces import WorktreeManager

    fleet = _fleet()
    full = resolve(fleet.ledger, "session", session_id)
    live = LiveOutput(live_max_bytes, sys.stdout.buffer, sys.stderr.buffer)
    cancel = threading.Event()
    box: dict[str, Any] = {}

    def workspace_of(session: Any) -> Path:
        link = child_ledger(fleet.ledger).link(session.session_id)
        manager = WorktreeManager.from_settings(fleet.settings)
        return session_workspace(session, link, manager.path_for)

    finished = threading.Event()
    pressed: list[int] = []

    def work() -> None:
        try:
            box["run"] = run_user_shell(
                fleet.ledger,
                fleet.inbox.post,
                full,
                list(command),
                sandbox=sandbox_for(fleet.settings),
                now=fleet.clock.now,
                timeout_s=timeout,
                cancel=cancel,
                on_output=None if as_json else live,
                workspace_of=workspace_of,
            )
        except BaseException as exc:  # re-raised on the main thread
            box["error"] = exc
        finally:
            finished.set()

    def on_sigint(signum: int, frame: object) -> None:
        # Ctrl-C is a cancel: the tool kills the whole process group, then the
        # result is recorded and queued as usual.  (A handler, not
        # KeyboardInterrupt: an interrupted Thread.join can lose the thread.)
        pressed.append(signum)
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        threading.Thread(target=work, name="nahida-shell", daemon=True).start()
        while not finished.wait(0.1):
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
    interrupted = bool(pressed)
    error = box.get("error")
    if error is not None:
        if is_delivery_failure(error):
            print_error(
                "error: the result is recorded; it will be queued when the broker is back "
                f"({error})"
            )
            raise typer.Exit(ExitCode.RECORDED)
        raise error
    run = box["run"]
    _report(run, live, as_json)
    raise typer.Exit(_exit_code(run.record.status, run.record.exit_code, interrupted))


def _exit_code(status: str, exit_code: int | None, interrupted: bool) -> int:
    if status == "cancelled" or interrupted:
        return int(ExitCode.INTERRUPTED)
    if status == "timed_out":
        return TIMED_OUT_EXIT
    return exit_code if exit_code is not None and 0 <= exit_code < 256 else 1


def _report(run: Any, live: LiveOutput, as_json: bool) -> None:
    from dataclasses import asdict

    record = run.record
    if as_json:
        print_json(
            {
                "record": asdict(record),
                "artifact": run.artifact,
                "message_id": run.message_id,
                "queued": run.queued,
                "not_queued_reason": run.not_queued_reason,
            }
        )
        return
    if live.binary or live.stopped:
        sys.stdout.write(record.output + "\n")  # the summaries / head and tail
    console = err()
    where = (
        f"queued for the agent as {run.message_id}"
        if run.message_id
        else f"not queued: {run.not_queued_reason}"
    )
    console.print(
        f"[nahida shell] {record.status} (exit code {record.exit_code}) in "
        f"{record.duration_ms} ms; recorded as {run.artifact}; {where}",
        markup=False,
        soft_wrap=True,
    )
