"""The user shell (issue 23 item 3): one test per rule.

===================================================  ==========================================
rule                                                 test
===================================================  ==========================================
runs in the session's workspace, in the sandbox      test_runs_in_the_workspace_and_the_sandbox
an isolated session: its worktree                    test_an_isolated_session_runs_in_its_worktree
the sandbox keeps writes inside the workspace        test_sandbox_is_the_bash_tools
a timeout kills the whole process tree               test_timeout_kills_the_process_tree
cancel (Ctrl-C) kills the whole process tree         test_cancel_kills_the_process_tree
live output as it arrives; captured output bounded   test_live_output_and_bounded_capture
binary output is a byte summary                      test_binary_output_is_a_summary
persisted first, then queued                         test_persisted_before_queued
queued as auxiliary steering; seen at a boundary     test_agent_sees_it_at_its_next_boundary
a done session is not woken                          test_done_session_is_recorded_not_queued
a full inbox: recorded, not queued                   test_a_full_inbox_still_records
bad input: typed errors, nothing recorded            test_bad_input
===================================================  ==========================================
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.lineage import ChildLink
from nahida_workers.core.records import InboxKind, InboxMessage, InboxStatus
from nahida_workers.errors import (
    InboxFullError,
    NotFoundError,
    UserError,
    WorkspaceUnavailableError,
)
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.runtime.usershell import ShellRun, run_user_shell, session_workspace
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec
from nahida_workers.testing.fleet import marked_processes, wait_for
from nahida_workers.tools.sandbox import Sandbox, SandboxMode, sandbox_problem

needs_bwrap = pytest.mark.skipif(
    sandbox_problem() is not None and os.environ.get("CI") != "true",
    reason=f"no bubblewrap sandbox here: {sandbox_problem()}",
)


@pytest.fixture
def marker() -> Iterator[str]:
    mark = f"nahida-shell-{uuid.uuid4().hex[:8]}"
    yield mark
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


class World:
    """A memory ledger, an inbox and one scripted session on ``ws``."""

    def __init__(self, ws: Path, turns: list[dict[str, Any]] | None = None) -> None:
        self.runner: SessionRunner = memory_runner()
        self.ledger = self.runner.ledger
        self.queue = ListTaskQueue()
        self.dispatcher = Dispatcher(self.ledger, self.queue, self.runner.clock)
        self.inbox = Inbox(self.ledger, self.runner.leases, self.dispatcher, self.runner.clock)
        spec = scripted_spec(turns or [{"text": "done"}], tools=("LS",))
        session, _ = self.dispatcher.submit(spec, workspace=str(ws))
        self.sid = session.session_id

    def shell(self, *argv: str, sandbox: Sandbox | None = None, **kw: Any) -> ShellRun:
        return run_user_shell(
            self.ledger,  # type: ignore[arg-type]
            self.inbox.post,
            self.sid,
            list(argv),
            sandbox=sandbox or Sandbox(),
            now=self.runner.clock.now,
            **kw,
        )

    def pending(self) -> list[InboxMessage]:
        return self.ledger.inbox(self.sid, statuses=[InboxStatus.PENDING])

    def record(self, run: ShellRun) -> dict[str, Any]:
        data = self.ledger.get_artifact(run.artifact)
        assert data is not None
        return json.loads(data)  # type: ignore[no-any-return]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@needs_bwrap
def test_runs_in_the_workspace_and_the_sandbox(ws: Path) -> None:
    world = World(ws)
    run = world.shell("pwd; echo hi")
    assert run.record.status == "ok" and run.record.exit_code == 0
    assert run.record.output == f"exit code: 0\nstdout:\n{ws}\nhi"
    assert run.record.evidence["sandbox"] == "bwrap"
    assert run.record.workspace == str(ws)
    several = world.shell("printf", "%s|", "a b", "$HOME")  # argv is quoted, not re-split
    assert several.record.command == "printf '%s|' 'a b' '$HOME'"
    assert several.record.output.endswith("a b|$HOME|")


@needs_bwrap
def test_sandbox_is_the_bash_tools(ws: Path) -> None:
    probe = Path.home() / f".nahida-shell-probe-{uuid.uuid4().hex[:8]}"  # /tmp is private
    run = World(ws).shell(f"touch {probe}")
    assert run.record.status == "error"
    assert "Read-only file system" in run.record.output
    assert not probe.exists()


def test_timeout_kills_the_process_tree(ws: Path, marker: str) -> None:
    world = World(ws)
    run = world.shell(
        f"(exec -a {marker} sleep 300) & (exec -a {marker} sleep 300) & wait",
        sandbox=Sandbox(mode=SandboxMode.NONE),
        timeout_s=0.5,
        kill_grace_s=0.2,
    )
    assert run.record.status == "timed_out" and run.record.exit_code is None
    assert run.record.evidence["timed_out"] is True
    assert marked_processes(marker) == []
    assert world.record(run)["status"] == "timed_out"


def test_cancel_kills_the_process_tree(ws: Path, marker: str) -> None:
    world = World(ws)
    cancel = threading.Event()
    started = threading.Event()

    def live(stream: str, chunk: bytes) -> None:
        if b"started" in chunk:
            started.set()

    def press_ctrl_c() -> None:
        started.wait(20)
        wait_for(lambda: len(_sleepers(marker)) == 2, timeout=20, what="both sleeps")
        cancel.set()

    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    run = world.shell(
        f"(exec -a {marker} sleep 300) & (setsid bash -c 'exec -a {marker} sleep 300') & "
        "echo started; wait",
        sandbox=Sandbox(),
        cancel=cancel,
        on_output=live,
        timeout_s=60,
        kill_grace_s=0.2,
    )
    presser.join()
    assert run.record.status == "cancelled"
    assert marked_processes(marker) == []  # setsid did not escape: the PID namespace died
    assert run.queued  # a cancelled command is still recorded and queued


def _sleepers(marker: str) -> list[int]:
    """The processes ``exec -a MARKER`` named (argv[0] is the marker)."""
    found = []
    for pid in marked_processes(marker):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(marker.encode()):
                found.append(pid)
    return found


def test_live_output_and_bounded_capture(ws: Path) -> None:
    world = World(ws)
    chunks: list[tuple[str, bytes]] = []
    run = world.shell(
        "yes | head -c 3000000; echo err >&2",
        sandbox=Sandbox(mode=SandboxMode.NONE),
        on_output=lambda s, c: chunks.append((s, c)),
        capture_max_bytes=4096,
    )
    assert sum(len(c) for s, c in chunks if s == "stdout") == 3_000_000  # every byte, live
    assert b"".join(c for s, c in chunks if s == "stderr") == b"err\n"
    ev = run.record.evidence
    assert ev["stdout_bytes"] == 3_000_000
    assert "truncated" in run.record.output
    assert len(run.record.output.encode()) < 16 * 1024  # the capture kept 4 KiB per stream
    text = world.pending()[0].text
    assert len(text.encode()) <= 9 * 1024


def test_binary_output_is_a_summary(ws: Path) -> None:
    (ws / "a.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4)
    world = World(ws)
    run = world.shell("cat a.gz", sandbox=Sandbox(mode=SandboxMode.NONE))
    assert "[binary output: 1028 bytes, sha256 " in run.record.output
    assert "gzip data]" in run.record.output
    assert "\ufffd" not in run.record.output
    assert run.record.evidence["stdout_binary"] is True


def test_persisted_before_queued(ws: Path) -> None:
    world = World(ws)
    seen: list[str] = []

    def failing_post(session_id: str, text: str, **kw: Any) -> Any:
        # The record is already in the ledger when the inbox is asked.
        seen.extend(a for a in _artifacts(world) if b"user_shell" in (_blob(world, a)))
        raise ConnectionError("broker down")

    with pytest.raises(ConnectionError):
        run_user_shell(
            world.ledger,  # type: ignore[arg-type]
            failing_post,
            world.sid,
            ["echo kept"],
            sandbox=Sandbox(mode=SandboxMode.NONE),
            now=world.runner.clock.now,
        )
    assert len(seen) == 1
    record = json.loads(world.ledger.get_artifact(seen[0]) or b"{}")
    assert record["kind"] == "user_shell" and record["output"].endswith("kept")


def _blob(world: World, sha: str) -> bytes:
    return world.ledger.get_artifact(sha) or b""


def _artifacts(world: World) -> list[str]:
    return list(world.ledger._t.artifacts)  # type: ignore[attr-defined]


def test_agent_sees_it_at_its_next_boundary(ws: Path) -> None:
    world = World(ws, [{"text": "Noted the shell result."}])
    run = world.shell("echo from-the-user", sandbox=Sandbox(mode=SandboxMode.NONE))
    assert run.queued and run.message_id == f"shell-{run.record.shell_id}"
    (message,) = world.pending()
    assert message.kind is InboxKind.USER and message.next_turn
    assert message.text.startswith("[auxiliary: the user ran a command in your workspace")
    assert f"record {run.artifact}" in message.text
    world.runner.run(world.sid)
    (agent_run,) = world.ledger.runs_of(world.sid)
    inputs = [
        e.payload["text"]
        for e in world.ledger.events(agent_run.run_id)
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "inbox"
    ]
    assert len(inputs) == 1 and "from-the-user" in inputs[0]


def test_done_session_is_recorded_not_queued(ws: Path) -> None:
    world = World(ws)
    world.runner.run(world.sid)
    run = world.shell("echo late", sandbox=Sandbox(mode=SandboxMode.NONE))
    assert not run.queued and run.message_id is None
    assert run.not_queued_reason is not None and "done" in run.not_queued_reason
    assert world.record(run)["output"].endswith("late")
    assert world.pending() == []
    assert len(world.ledger.runs_of(world.sid)) == 1  # no new run started


def test_bad_input(ws: Path, tmp_path: Path) -> None:
    world = World(ws)
    none = Sandbox(mode=SandboxMode.NONE)
    with pytest.raises(UserError, match="no command"):
        world.shell(sandbox=none)
    with pytest.raises(UserError, match="no command"):
        world.shell("  ", sandbox=none)
    with pytest.raises(UserError, match="--timeout must be positive"):
        world.shell("true", sandbox=none, timeout_s=0)
    world.sid = "no-such-session"
    with pytest.raises(NotFoundError):
        world.shell("true", sandbox=none)
    gone = World(tmp_path / "missing")
    with pytest.raises(WorkspaceUnavailableError):
        gone.shell("true", sandbox=none)
    assert _artifacts(world) == [] and _artifacts(gone) == []


def test_an_isolated_session_runs_in_its_worktree(ws: Path, tmp_path: Path) -> None:
    world = World(ws)
    session = world.ledger.get_session(world.sid)
    assert session is not None
    tree = tmp_path / "trees" / world.sid
    tree.mkdir(parents=True)

    def path_for(repo: Path, sid: str) -> Path:
        assert (repo, sid) == (ws, world.sid)
        return tree

    isolated = ChildLink(world.sid, lineage={"isolation": "worktree"})
    assert session_workspace(session, isolated, path_for) == tree
    assert session_workspace(session, ChildLink(world.sid), path_for) == ws
    assert session_workspace(session, None, path_for) == ws
    top = session.model_copy(update={"config": {**session.config, "isolation": "worktree"}})
    assert session_workspace(top, None, path_for) == tree  # a top-level isolated session
    run = world.shell(
        "pwd",
        sandbox=Sandbox(mode=SandboxMode.NONE),
        workspace_of=lambda s: session_workspace(s, isolated, path_for),
    )
    assert run.record.output.endswith(str(tree)) and run.record.workspace == str(tree)


def test_a_full_inbox_still_records(ws: Path) -> None:
    world = World(ws)

    def full(session_id: str, text: str, **kw: Any) -> Any:
        raise InboxFullError("the inbox holds 20 pending user messages")

    run = run_user_shell(
        world.ledger,  # type: ignore[arg-type]
        full,
        world.sid,
        ["echo kept"],
        sandbox=Sandbox(mode=SandboxMode.NONE),
        now=world.runner.clock.now,
    )
    assert not run.queued and run.not_queued_reason is not None
    assert "inbox holds 20" in run.not_queued_reason
    assert world.record(run)["output"].endswith("kept")
