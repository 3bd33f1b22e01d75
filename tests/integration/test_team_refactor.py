"""``config/jobs/team-refactor.yaml`` on real workers with ``-c 1``: a lead and three members.

DESIGN.md section 8.  Three ``celery -A tasks worker -c 1`` processes (prefork,
one session slot each) over the real Redis and PostgreSQL run the job's lead
and its three members -- four sessions on three slots, so the lead must park
(no slot held) for the third member to run -- over a corpus repository (a
clone of one when ``corpus/`` was fetched, else a fixture shaped like one),
each member in its own git worktree.  Six tasks with dependencies:

* the race: every worker pauses one second between reading the graph and
  its claim (the test-only pause point ``team_claim``), so the members that
  start together all go for the one claimable task -- one wins, the others'
  attempts are recorded ``lost``, and they park idle until work arrives;
* the kill: the job's ``eol`` task is made slow (its command first records
  the attempt in the worktree, then sleeps), and the worker process running
  it is SIGKILLed mid-command.  The next owner of that member closes the
  command ``interrupted`` (never re-run), its completion is refused (the
  receipt behind the result is not ok), the gate tells it that it still
  holds the task, and it renews its own claim (``refenced``) and does it again.

Every task is claimed once and completed once, by the member that claimed
it; the lead ends ``completed`` after its members.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.teams import LogAction, TeamRole
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ledger.teams import team_ledger
from nahida_workers.runtime.commits.pause_points import PAUSE_ENV
from nahida_workers.runtime.spec import SessionSpec, load_job
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for
from nahida_workers.workspaces import WorktreeManager
from tests.integration.children_world import leases, owner_pid, terminal_state

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "config" / "jobs" / "team-refactor.yaml"
SLOW = "eol"
MARK = ".refactor/eol-attempts"

FIXTURE = {
    "README.md": "# demo-pkg\n\nA small package.\n",
    "pyproject.toml": '[project]\nname = "demo-pkg"\nversion = "1.0"\n',
    "src/demo_pkg/__init__.py": "class Demo:   \n    pass",
    "src/demo_pkg/core.py": "# TODO: split\ndef run():\n    print('run')  \n    return 1\n",
    "tests/test_demo.py": "def test_demo():\n    assert True\n",
}


def _repository(tmp_path: Path) -> Path:
    """A private clone of the first corpus repository, else the fixture repository."""
    listed = ROOT / "corpus" / "repos.txt"
    if listed.is_file():
        for line in listed.read_text().splitlines():
            path = Path(line.strip())
            path = path if path.is_absolute() else ROOT / path
            if line.strip() and (path / ".git").exists():
                clone = tmp_path / path.name
                subprocess.run(["git", "clone", "-q", str(path), str(clone)], check=True)
                return clone
    return make_repo(tmp_path / "demo-pkg", FIXTURE)


def _slow_eol(spec: SessionSpec) -> SessionSpec:
    """The job with its ``eol`` task's command recording each attempt, then sleeping."""
    data = spec.model_dump(mode="json")
    for call in data["provider"]["script"]["turns"][0]["tool_calls"]:
        if call["arguments"].get("task_id") == SLOW:
            original = call["arguments"]["description"]
            record = f'mkdir -p .refactor && echo "$NAHIDA_SESSION_ID" >> {MARK}'
            call["arguments"]["description"] = f"{record} && sleep 4 && {original}"
    return SessionSpec.model_validate(data)


def _bash_of(pg: SqlLedger, member: str) -> list[tuple[Any, Any]]:
    """The member's Bash calls that ran the slow task, with their result (or None)."""
    out = []
    for run in pg.runs_of(member):
        events = pg.events(run.run_id)
        results = {e.call_id: e for e in events if e.type is EventType.TOOL_RESULT}
        calls = [e for e in events if e.type is EventType.TOOL_CALL]
        for e in calls:
            command = str(e.payload.get("arguments", {}).get("command", ""))
            if e.payload.get("name") == "Bash" and MARK in command:
                out.append((e, results.get(e.call_id)))
    return out


def test_team_refactor_on_real_workers_with_a_race_and_a_killed_member(
    postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(
        postgres_url,
        redis_server,
        logs,
        lease_ttl_s=4.0,
        visibility_timeout_s=600,
        extra_env={PAUSE_ENV: "team_claim", "NAHIDA_TEST_PAUSE_S": "1"},
    )
    try:
        for n in range(3):
            fleet.start_worker(name=f"s{n}", concurrency=1, pool="prefork")
        repo = _repository(tmp_path)
        lead = submit(fleet.dispatcher(pg), _slow_eol(load_job(JOB).session_spec()), repo)
        teams = team_ledger(pg)

        def running_slow_task() -> str | None:
            state = teams.read_team(lead)
            task = state.task(SLOW) if state is not None else None
            if task is None or task.owner is None:
                return None
            calls = _bash_of(pg, task.owner)
            return task.owner if calls and calls[-1][1] is None else None

        killed = wait_for(running_slow_task, timeout=120, what="a member running the slow task")
        wait_for(lambda: _attempts(repo, killed) >= 1, timeout=10, what="it started")
        pid = owner_pid(leases(fleet, redis_server), killed)
        assert pid not in {w.proc.pid for w in fleet.workers}, "a pool child, not a worker parent"
        os.kill(pid, signal.SIGKILL)
        wait_done(pg, lead, timeout=240)
        _audit(pg, lead, killed, repo)
        assert all(w.proc.poll() is None for w in fleet.workers), "the worker parents live on"
    except BaseException:
        for worker in fleet.workers:
            print(f"--- {worker.name}\n{worker.text()[-4000:]}")
        raise
    finally:
        fleet.stop()


def _attempts(repo: Path, member: str) -> int:
    """Lines in the member's attempts file: in its worktree now, on its branch once it ended."""
    marker = WorktreeManager().path_for(repo, member) / MARK
    if marker.is_file():
        return len(marker.read_text().splitlines())
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", f"nahida/{member}:{MARK}"],
        capture_output=True,
        text=True,
    )
    return len(shown.stdout.splitlines()) if shown.returncode == 0 else 0


def _audit(pg: SqlLedger, lead: str, killed: str, repo: Path) -> None:
    teams = team_ledger(pg)
    state = teams.read_team(lead)
    assert state is not None
    members = [m for m in state.members if m.role is TeamRole.MEMBER]
    assert sorted(m.name for m in members) == ["alice", "bob", "bob-2"]
    assert len({m.member_id for m in members}) == 3
    assert len(state.tasks) == 6 and all(t.status.value == "done" for t in state.tasks)
    assert sum(1 for t in state.tasks if t.depends_on) == 5
    history = teams.task_log(lead)
    claimed = Counter(e.task_id for e in history if e.action is LogAction.CLAIMED)
    done = Counter(e.task_id for e in history if e.action is LogAction.DONE)
    assert claimed == Counter({t.task_id: 1 for t in state.tasks}), history
    assert done == claimed
    owner_of = {e.task_id: e.member_id for e in history if e.action is LogAction.CLAIMED}
    assert all(e.member_id == owner_of[e.task_id] for e in history if e.action is LogAction.DONE)
    assert {t.task_id: t.owner for t in state.tasks} == owner_of
    # the race: members that read one graph went for one task; one won, the others lost
    lost = [e for e in history if e.action is LogAction.LOST]
    assert lost and all(e.member_id != owner_of[e.task_id] for e in lost)
    # the kill: the slow task's first run was interrupted, never re-run by recovery; the
    # member renewed its own claim at a later epoch and ran it again to completion
    assert owner_of[SLOW] == killed
    renewed = [e for e in history if e.task_id == SLOW and e.action is LogAction.REFENCED]
    first = next(e for e in history if e.task_id == SLOW and e.action is LogAction.CLAIMED)
    assert [e.member_id for e in renewed] == [killed] and renewed[0].epoch > first.epoch  # type: ignore[operator]
    runs = _bash_of(pg, killed)
    assert [r.payload["status"] for _, r in runs] == ["interrupted", "ok"]
    assert _attempts(repo, killed) == 2  # the killed attempt, then the redo
    (task,) = [t for t in state.tasks if t.task_id == SLOW]
    assert task.receipt is not None
    assert task.receipt["evidence"] == [
        {"call_id": runs[1][0].call_id, "tool_name": "Bash", "status": "ok"}
    ]
    # parking: the lead waited for the graph, idle members waited for work
    parks = Counter(
        e.payload.get("waiting_on")
        for sid in [lead, *(m.member_id for m in members)]
        for run in pg.runs_of(sid)
        for e in pg.events(run.run_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == "parked"
    )
    assert parks["tasks"] >= 1 and parks["idle"] >= 1
    assert terminal_state(pg, lead) == "completed"
    assert all(terminal_state(pg, m.member_id) == "completed" for m in members)
    # each member's changes are committed on its own branch, in its own worktree
    for m in members:
        branch = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", f"nahida/{m.member_id}"],
            capture_output=True,
        )
        assert branch.returncode == 0, f"no branch for {m.name}"
