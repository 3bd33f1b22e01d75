"""``nahida batch`` under Ctrl-C, --timeout, --resume misuse, no worker and a ledger outage.

Real processes: the installed console script, SIGINT sent like a terminal
would, Bash children found through /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from nahida_workers.core.events import SessionStatus
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.testing.fleet import Fleet, make_repo, marked_processes, wait_for
from tests.cli.helpers import clean_env, nahida, nahida_script
from tests.conftest import PG_ADMIN_DSN

pytestmark = pytest.mark.slow


def _marked_shells(marker: str) -> set[int]:
    """The Bash commands of this test running now: marked group leaders.

    Each command runs in its own session (pid == process group id); a fork of
    the shell (``$(seq 600)``, a ``sleep`` before its exec) shares the command
    line for a moment but not the leadership, so it is not counted twice.
    """
    leaders = set()
    for pid in marked_processes(marker):
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                leaders.add(pid)
    return leaders


def _slow_job(tmp_path: Path, marker: str, *, name: str = "slow") -> Path:
    """One Bash call that waits (60 s at most) until ``stop`` exists in its workspace
    (the one directory the sandbox shares with it: :func:`_release`), then a final answer."""
    job = tmp_path / f"{name}.yaml"
    command = f"for i in $(seq 600); do test -e stop && break; sleep 0.1; done # {marker}"
    job.write_text(
        f"name: {name}\nprompt: go\ntools: [Bash]\nprovider:\n  kind: scripted\n  script:\n"
        "    turns:\n      - text: work\n        tool_calls:\n"
        f"          - {{id: b, name: Bash, arguments: {{command: '{command}'}}}}\n"
        "      - text: done\n"
    )
    return job


def _release(repos: list[Path]) -> None:
    """Let every waiting command of :func:`_slow_job` in ``repos`` finish."""
    for repo in repos:
        (repo / "stop").write_text("")


def _start(args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [nahida_script(), *args],
        cwd=cwd,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_counts_right_exits_130_kills_bash_and_resumes(tmp_path: Path, presses: int) -> None:
    marker = f"nahida-ctrlc-{uuid.uuid4().hex[:8]}"
    job = _slow_job(tmp_path, marker)
    repos = [make_repo(tmp_path / f"r{i}") for i in range(3)]
    db = tmp_path / "ledger.sqlite3"
    args = ["batch", str(job), "--local", "--db", str(db), "--workers", "2"]
    for repo in repos:
        args += ["--repo", str(repo)]
    proc = _start(args, tmp_path)
    try:
        wait_for(lambda: len(_marked_shells(marker)) >= 2, timeout=60, what="two Bash commands")
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
        # The sleeps last 60 s: an exit well before that means nothing waited for them.
        _out, err_bytes = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err_bytes.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert marked_processes(marker) == [], "a Bash child outlived the batch"
    if presses == 1:
        assert "interrupted: 0/3 sessions done, 2 in flight interrupted (resumable)" in err, err
    batch_id = err.split("batch ", 1)[1].split(":", 1)[0]
    ledger = SqlLedger(engine=make_engine(f"sqlite:///{db}"))
    statuses = sorted(s.status.value for s in ledger.sessions(batch_id=batch_id))
    assert statuses == ["queued", "running", "running"]

    _release(repos)
    resumed = nahida([*args, "--resume", batch_id[:8]], cwd=tmp_path, timeout=120)
    assert resumed.code == 0, resumed.output
    sessions = ledger.sessions(batch_id=batch_id)
    assert {s.status for s in sessions} == {SessionStatus.DONE}
    interrupted = 0
    for session in sessions:
        for run in ledger.runs_of(session.session_id):
            results = [e.payload for e in ledger.events(run.run_id) if e.call_id == "b"]
            interrupted += sum(1 for p in results if p.get("synthetic"))
    assert interrupted == 2, "the two Bash calls in flight were settled as interrupted"


def test_timeout_exits_5_with_the_resume_hint_promptly_and_quietly(tmp_path: Path) -> None:
    marker = f"nahida-timeout-{uuid.uuid4().hex[:8]}"
    job = _slow_job(tmp_path, marker)
    repo = make_repo(tmp_path / "r")
    db = tmp_path / "l.sqlite3"
    base = ["batch", str(job), "--local", "--db", str(db), "--repo", str(repo)]
    proc = _start([*base, "--timeout", "2"], tmp_path)
    lines: list[tuple[float, str]] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            lines.append((time.monotonic(), raw.decode(errors="replace")))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        wait_for(lambda: marked_processes(marker), timeout=60, what="the Bash sleep")
        # The Bash call waits 60 s: an exit well before means nothing waited for it.
        proc.wait(timeout=30)
        exited = time.monotonic()
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)
    err = "".join(line for _at, line in lines)
    assert proc.returncode == 5, err
    assert "timed out after 2s" in err and "--resume" in err and "Traceback" not in err
    assert marked_processes(marker) == []
    (said,) = [at for at, line in lines if "timed out after" in line]
    # As prompt as Ctrl-C: no wait for the worker threads' shutdown (it took 2-18 s).
    assert exited - said < 1.0, f"exited {exited - said:.2f}s after the timeout message"
    after = [line for at, line in lines if at >= said and "timed out after" not in line]
    noise = [line for line in after if "WARNING" in line or "celery" in line.lower()]
    assert not noise, f"log lines after the timeout message: {noise}"
    ledger = SqlLedger(engine=make_engine(f"sqlite:///{db}"))
    (session,) = ledger.sessions()
    assert session.status is SessionStatus.RUNNING  # fenced, left for --resume


def test_resume_refuses_another_job_or_repository_list(tmp_path: Path) -> None:
    job = _slow_job(tmp_path, "x")
    other_job = _slow_job(tmp_path, "y", name="other")
    repos = [make_repo(tmp_path / f"r{i}") for i in range(2)]
    _release(repos)
    db = tmp_path / "l.sqlite3"
    report = tmp_path / "rep.json"
    two = ["--repo", str(repos[0]), "--repo", str(repos[1])]
    first = nahida(
        ["batch", str(job), "--local", "--db", str(db), "--report", str(report), *two], cwd=tmp_path
    )
    assert first.code == 0, first.output
    batch_id = json.loads(report.read_text())["batch_id"]
    other = nahida(
        ["batch", str(other_job), "--local", "--db", str(db), "--resume", batch_id, *two],
        cwd=tmp_path,
    )
    assert other.code == 2 and "the job differs" in other.one_error_line()
    fewer = nahida(
        ["batch", str(job), "--local", "--db", str(db), "--resume", batch_id, *two[:2]],
        cwd=tmp_path,
    )
    assert fewer.code == 2 and "repository list differs" in fewer.one_error_line()


def test_distributed_batch_with_no_worker_says_so(fleet: Fleet, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    job = _slow_job(tmp_path, "none")
    done = nahida(
        ["batch", str(job), "--repo", str(repo), "--timeout", "9"], cwd=tmp_path, env=fleet.env()
    )
    assert done.code == 5, done.output
    assert "no worker is consuming the 'sessions' queue" in done.stderr
    assert "celery -A tasks worker -Q sessions" in done.stderr
    assert "Traceback" not in done.output


def _set_connections(db_name: str, allowed: bool) -> None:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{db_name}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (db_name,),
            )


def test_distributed_batch_rides_out_a_short_ledger_outage(
    fleet: Fleet, pg: SqlLedger, postgres_url: str, postgres_engine: Engine, tmp_path: Path
) -> None:
    """A 4 s outage (backends terminated, connections refused) while the batch waits."""
    job = _slow_job(tmp_path, f"outage-{uuid.uuid4().hex[:6]}")
    repos = [make_repo(tmp_path / f"r{i}") for i in range(3)]
    fleet.start_worker(queues="sessions", concurrency=3, name="s1")
    args = ["batch", str(job)]
    for repo in repos:
        args += ["--repo", str(repo)]
    env = {**fleet.env(), "NAHIDA_LEDGER_OUTAGE_S": "15"}
    proc = subprocess.Popen(
        [nahida_script(), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    db_name = postgres_url.rsplit("/", 1)[1]
    try:
        wait_for(
            lambda: len(pg.sessions(statuses=[SessionStatus.RUNNING])) == 3,
            timeout=60,
            what="three running sessions",
        )
        _set_connections(db_name, False)
        time.sleep(4)
    finally:
        _set_connections(db_name, True)
        postgres_engine.dispose()  # its pooled connections were terminated too
    _release(repos)
    out, err = proc.communicate(timeout=120)
    text = out.decode() + err.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text and "AdminShutdown" not in text
    fresh = SqlLedger(engine=make_engine(postgres_url))
    assert len(fresh.sessions(statuses=[SessionStatus.DONE])) == 3, text
