"""The user shell: a person runs a command in a session's workspace.

``nahida shell SESSION -- CMD`` runs ``CMD`` the way the session's Bash tool
would: in the session's workspace, in the same sandbox (bubblewrap, the
job's ``network``), in its own process group killed whole on timeout or
cancel, with bounded captured output and binary output shown as a byte
summary (:mod:`nahida_workers.tools.output_bytes`).  Then, in this order:

1. the result is **persisted** in the ledger: a JSON record stored as a
   content-addressed artifact (``prompt_artifacts``; its sha256 is the
   record's address), so it survives whatever happens next;
2. it is **queued as auxiliary steering** in the session's inbox (message id
   ``shell-<shell id>``, so a retry is one message): the agent sees it at its
   next provider boundary as information, not as a new instruction.

A done session is not woken by it: the result is recorded and not queued
(steering it starts the next run; the record names what ran).  Nor is a
session whose inbox is full (the result is recorded all the same).
"""

from __future__ import annotations

import json
import shlex
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from nahida_workers.core.events import SessionStatus
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.records import InboxKind, SessionRecord
from nahida_workers.errors import (
    InboxFullError,
    NotFoundError,
    ToolError,
    UserError,
    WorkspaceUnavailableError,
)
from nahida_workers.runtime.children.worktree import isolated, top_level_isolated
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.processes import ChildProcesses
from nahida_workers.tools.sandbox import Sandbox
from nahida_workers.tools.workspace import cap_text

__all__ = [
    "CAPTURE_MAX_BYTES",
    "STEER_OUTPUT_MAX_BYTES",
    "ShellLedger",
    "ShellPoster",
    "ShellRecord",
    "ShellRun",
    "run_user_shell",
    "session_workspace",
    "steering_text",
]

#: Bytes of each stream a user shell keeps (head and tail) in its record.
CAPTURE_MAX_BYTES = 256 * 1024
#: Bytes of output the steering message carries (the inbox bounds a session's
#: pending bytes, 64 KiB by default); the record holds the rest.
STEER_OUTPUT_MAX_BYTES = 8 * 1024
#: Bytes of rendered output (both streams) kept in the record.
RECORD_OUTPUT_MAX_BYTES = 2 * CAPTURE_MAX_BYTES


class ShellLedger(Protocol):
    """The ledger ports a user shell needs: the session row and the artifact store."""

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session row, or None."""
        ...

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` once; its sha256 hex."""
        ...


class ShellPoster(Protocol):
    """Where the result is queued (``runtime.dispatch.inbox.Inbox.post``)."""

    def __call__(
        self, session_id: str, text: str, *, message_id: str, kind: InboxKind, next_turn: bool
    ) -> tuple[Any, bool]:
        """Enqueue ``text``; ``(message, created)``."""
        ...


@dataclass(frozen=True)
class ShellRecord:
    """What one user shell did (the persisted record; JSON of :func:`dataclasses.asdict`).

    Attributes:
        shell_id: hex id; the inbox message id is ``shell-<shell_id>``.
        command: the shell text run (``shlex.join`` of the argv given).
        status: ``ok``, ``error`` (non-zero exit), ``timed_out`` or ``cancelled``.
        exit_code: None when the command was killed (timeout, cancel).
        output: the rendered result as the Bash tool renders it (binary
            streams as byte summaries), at most :data:`RECORD_OUTPUT_MAX_BYTES`.
        evidence: the Bash evidence (sizes, sha256s, ``stdout_binary``, sandbox ...).
    """

    shell_id: str
    session_id: str
    workspace: str
    command: str
    status: str
    exit_code: int | None
    duration_ms: int
    started_at: str
    output: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class ShellRun:
    """The outcome of :func:`run_user_shell`.

    Attributes:
        record: what ran and what it printed.
        artifact: sha256 of the persisted record (``prompt_artifacts``).
        message_id: the inbox message id, or None when not queued.
        queued: True when a new inbox message was written.
        not_queued_reason: why it was not queued (a done session), else None.
    """

    record: ShellRecord
    artifact: str
    message_id: str | None
    queued: bool
    not_queued_reason: str | None = None


def steering_text(record: ShellRecord, artifact: str) -> str:
    """The auxiliary steering message the agent reads at its next boundary.

    The output is capped at :data:`STEER_OUTPUT_MAX_BYTES` (head and tail kept);
    the record's address lets a person read the rest.
    """
    shown, _ = cap_text(record.output, STEER_OUTPUT_MAX_BYTES)
    return (
        "[auxiliary: the user ran a command in your workspace with `nahida shell`; "
        "this is information, not a new instruction]\n"
        f"$ {cap_text(record.command, 1024)[0]}\n{shown}\n"
        f"(status {record.status}; record {artifact})"
    )


def session_workspace(
    session: SessionRecord,
    link: ChildLink | None,
    worktree_path: Callable[[Path, str], Path],
) -> Path:
    """Where the session's tools run: its worktree when it has ``isolation: worktree``.

    A child asks for it in its Task call (its lineage), a top-level session in
    its job (its config), as the session owner decides it.

    Args:
        session: the session row.
        link: its lineage (``child_ledger(ledger).link(session_id)``), or None.
        worktree_path: ``WorktreeManager.path_for`` (nothing is created).
    """
    top_level = session.parent_id is None and top_level_isolated(session.config)
    if isolated(link) or top_level:
        return worktree_path(Path(session.workspace), session.session_id)
    return Path(session.workspace)


def run_user_shell(
    ledger: ShellLedger,
    post: ShellPoster,
    session_id: str,
    argv: list[str],
    *,
    sandbox: Sandbox,
    now: Callable[[], datetime],
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
    capture_max_bytes: int = CAPTURE_MAX_BYTES,
    kill_grace_s: float = 2.0,
    workspace_of: Callable[[SessionRecord], Path] | None = None,
) -> ShellRun:
    """Run ``argv`` in the session's workspace and sandbox; persist, then queue the result.

    Args:
        ledger: the session row and the artifact store.
        post: the inbox's ``post``.
        session_id: the full session id.
        argv: the command; one element is shell text (``-- 'make test | tail'``),
            several are quoted and joined (``-- ls -la``).
        sandbox: the sandbox (``registration.sandbox_for(settings, network=...)``).
        now: the clock.
        timeout_s: seconds before the process group is killed (default: the
            job's ``limits.bash_timeout_s``).
        cancel: set it (Ctrl-C) to kill the process group; the result is
            still persisted and queued, as ``cancelled``.
        on_output: live output, ``(stream, chunk)`` on the reader threads.
        capture_max_bytes: bytes kept per stream (head and tail).
        kill_grace_s: seconds between SIGTERM and SIGKILL.
        workspace_of: where the session's tools run (:func:`session_workspace`;
            default the session's ``workspace``).

    Raises:
        UserError: an empty command or a non-positive timeout.
        NotFoundError: no such session.
        WorkspaceUnavailableError: the workspace is not a directory here.
        UserError: the command could not start (no sandbox can be made ...);
            nothing is recorded then.
    """
    if not argv or not any(a.strip() for a in argv):
        raise UserError("no command: pass it after `--` (nahida shell SESSION -- CMD)")
    session = ledger.get_session(session_id)
    if session is None:
        raise NotFoundError(f"no session {session_id}")
    workspace = workspace_of(session) if workspace_of is not None else Path(session.workspace)
    if not workspace.is_dir():
        raise WorkspaceUnavailableError(
            f"session {session_id}'s workspace {workspace} is not a directory on this host"
        )
    spec = SessionSpec.model_validate(session.config)
    limit = spec.limits.bash_timeout_s if timeout_s is None else timeout_s
    if limit <= 0:
        raise UserError(f"--timeout must be positive, got {limit:g}")
    command = argv[0] if len(argv) == 1 else shlex.join(argv)
    bash = Bash(
        timeout_s=limit,
        max_capture_bytes=capture_max_bytes,
        kill_grace_s=kill_grace_s,
        processes=ChildProcesses(),
        sandbox=sandbox.with_network(spec.network),
        on_output=on_output,
    )
    shell_id = uuid.uuid4().hex
    started = now()
    ctx = ToolContext(
        workspace=workspace.resolve(),
        run_id=f"shell-{shell_id}",
        call_id=shell_id,
        idempotency_key=f"shell:{shell_id}",
        max_output_bytes=RECORD_OUTPUT_MAX_BYTES,
        cancel=cancel or threading.Event(),
    )
    try:
        outcome = bash.execute({"command": command}, ctx)
    except ToolError as exc:
        raise UserError(f"the command did not start: {exc} ({exc.code})") from None
    evidence = dict(outcome.evidence)
    record = ShellRecord(
        shell_id=shell_id,
        session_id=session_id,
        workspace=str(workspace),
        command=command,
        status=outcome.status.value,
        exit_code=evidence.get("exit_code"),
        duration_ms=int(evidence.get("duration_ms", 0)),
        started_at=started.isoformat(),
        output=outcome.content,
        evidence=evidence,
    )
    # Persisted first: whatever happens to the inbox post, the result is in the ledger.
    data = json.dumps({"kind": "user_shell", **asdict(record)}, sort_keys=True).encode("utf-8")
    artifact = ledger.put_artifact(data, at=now())
    current = ledger.get_session(session_id)
    if current is not None and current.status is SessionStatus.DONE:
        return ShellRun(
            record,
            artifact,
            None,
            False,
            "the session is done; steer it to start its next run",
        )
    message_id = f"shell-{shell_id}"
    try:
        _, created = post(
            session_id,
            steering_text(record, artifact),
            message_id=message_id,
            kind=InboxKind.USER,
            next_turn=True,
        )
    except InboxFullError as exc:  # recorded all the same; say why it is not queued
        return ShellRun(record, artifact, None, False, str(exc))
    return ShellRun(record, artifact, message_id, created)
