"""``nahida shell`` against a real PostgreSQL, Redis and a session worker (issue 23 item 3).

The command runs as a user runs it (the console script, in its own
process); the session's worker then claims the queued result at its first
boundary.  Ctrl-C is a real SIGINT to the ``nahida`` process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.records import InboxStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, marked_processes, wait_done, wait_for
from tests.cli.helpers import nahida_script

pytestmark = pytest.mark.slow


@pytest.fixture
def marker() -> Iterator[str]:
    mark = f"nahida-shcli-{uuid.uuid4().hex[:8]}"
    yield mark
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _shell(fleet: Fleet, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [nahida_script(), "shell", *args],
        env={**os.environ, **fleet.env()},
        capture_output=True,
        timeout=timeout,
    )


def _session(fleet: Fleet, pg: SqlLedger, repo: Path) -> str:
    spec = scripted_spec([{"text": "Saw what the user ran."}], tools=("LS",))
    session, _ = fleet.dispatcher(pg).submit(spec, workspace=str(repo))
    return session.session_id


def test_shell_runs_records_queues_and_the_agent_sees_it(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "r")
    sid = _session(fleet, pg, repo)
    done = _shell(fleet, sid[:12], "--", "git status --short; echo made > new.txt; ls; exit 3")
    assert done.returncode == 3, done.stderr  # the command's exit code
    out = done.stdout.decode()
    assert "new.txt" in out and "README.md" in out  # live output, in the workspace
    assert (repo / "new.txt").read_text() == "made\n"
    (message,) = pg.inbox(sid, statuses=[InboxStatus.PENDING])
    assert message.message_id.startswith("shell-")
    assert "[auxiliary: the user ran a command" in message.text and "exit code: 3" in message.text
    artifact = message.text.rsplit("record ", 1)[1].rstrip(")")
    record = json.loads(pg.get_artifact(artifact) or b"{}")
    assert record["kind"] == "user_shell" and record["exit_code"] == 3
    assert record["evidence"]["sandbox"] == "bwrap"
    assert f"recorded as {artifact}" in done.stderr.decode()
    fleet.start_worker(name="w")
    wait_done(pg, sid, timeout=60)
    (run,) = pg.runs_of(sid)
    inputs = [
        e.payload["text"]
        for e in pg.events(run.run_id)
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "inbox"
    ]
    assert len(inputs) == 1 and "new.txt" in inputs[0]


def test_ctrl_c_kills_the_tree_and_still_records(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path, marker: str
) -> None:
    repo = make_repo(tmp_path / "r")
    sid = _session(fleet, pg, repo)
    proc = subprocess.Popen(
        [
            nahida_script(),
            "shell",
            sid,
            "--",
            f"(exec -a {marker} sleep 300) & (setsid bash -c 'exec -a {marker} sleep 300') & "
            "echo started; wait",
        ],
        env={**os.environ, **fleet.env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n"
        wait_for(lambda: len(marked_processes(marker)) >= 2, timeout=20, what="the sleeps")
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, proc.stderr.read() if proc.stderr else ""
    assert took < 10
    assert marked_processes(marker) == []
    (message,) = pg.inbox(sid, statuses=[InboxStatus.PENDING])
    assert "(status cancelled;" in message.text


def test_timeout_exit_124_and_binary_summary(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / "blob.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    sid = _session(fleet, pg, repo)
    binary = _shell(fleet, sid, "--", "cat blob.png")
    assert binary.returncode == 0
    shown = binary.stdout.decode("utf-8")  # never raw bytes on the terminal
    assert "[binary output: 264 bytes, sha256 " in shown and "PNG image]" in shown
    assert b"\x89PNG" not in binary.stdout
    slow = _shell(fleet, sid, "--timeout", "0.5", "--", "sleep 30")
    assert slow.returncode == 124, slow.stderr


def test_bad_input_is_one_line(fleet: Fleet, pg: SqlLedger, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    sid = _session(fleet, pg, repo)
    for args, needle in (
        (["nosuchid", "--", "true"], "no session"),
        ([sid, "--", " "], "no command"),
        ([sid, "--timeout", "0", "--", "true"], "0"),
    ):
        done = _shell(fleet, *args)
        err = [ln for ln in done.stderr.decode().splitlines() if ln.strip()]
        assert done.returncode == 2, (args, done.stderr)
        assert len(err) == 1 and needle in err[0], (args, err)
    assert pg.inbox(sid) == []
