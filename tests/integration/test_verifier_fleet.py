"""The reserved verifier on a real fleet: one session slot, and a parent killed mid-start.

DESIGN.md sections 6 and 8.  Real ``celery -A tasks worker`` processes
(prefork pool) over the real Redis and PostgreSQL:

* with ONE session slot (``-c 1``) a parent whose changes trigger the
  independent verification gate parks (``waiting``, a ``parked`` event
  naming its verifier) while the verifier child runs on that same slot, then
  adopts the verifier's PASS and completes;
* the parent's owner is SIGKILLed right after it committed and published
  its verifier (a test-only pause point, ``runtime/commits/pause_points.py``)
  and before it parked: the next owner parks on the same verifier -- one
  verifier child, one ``verifier_started``, the verdict adopted once.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.core.policy.verification import VERDICT_SCHEMA
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.commits.pause_points import PAUSE_ENV
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for
from tests.integration.children_world import leases, owner_pid, terminal_state

pytestmark = pytest.mark.slow

PASS = {
    "kind": "scripted",
    "script": {
        "turns": [
            {"tool_calls": [{"id": "g", "name": "Glob", "arguments": {"pattern": "src/*.py"}}]},
            {
                "tool_calls": [
                    {
                        "id": "v",
                        "name": "StructuredOutput",
                        "arguments": {"verdict": "PASS", "reasons": ["a, b and c are there"]},
                    }
                ]
            },
            {"text": "Verdict given."},
        ]
    },
}


def _spec() -> Any:
    writes = [
        {"id": f"w{i}", "name": "Write", "arguments": {"path": f"src/{m}.py", "content": "X = 1\n"}}
        for i, m in enumerate("abc")
    ]
    return scripted_spec(
        [{"text": "Writing.", "tool_calls": writes}, {"text": "Three modules are in place."}],
        tools=["Read", "Write", "Task"],
        verification={"provider": PASS},
    )


def _verifiers(pg: SqlLedger, parent: str) -> list[Any]:
    kids = child_ledger(pg).children(parent)
    return [k for k in kids if k.config["contract"]["output_schema"] == VERDICT_SCHEMA]


def _controls(pg: SqlLedger, run_id: str, kind: str) -> list[Any]:
    return [
        e
        for e in pg.events(run_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == kind
    ]


def test_the_verifier_runs_on_the_one_slot_its_parent_released(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    fleet.start_worker(concurrency=1, pool="prefork")  # ONE session slot
    parent = submit(fleet.dispatcher(pg), _spec(), make_repo(tmp_path / "repo"))
    seen: list[tuple[SessionStatus, bool]] = []  # (parent status, a verifier unfinished)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        session = pg.get_session(parent)
        assert session is not None
        kids = _verifiers(pg, parent)
        seen.append((session.status, any(k.status is not SessionStatus.DONE for k in kids)))
        if session.status is SessionStatus.DONE:
            break
        time.sleep(0.05)
    logs = "\n".join(w.text()[-3000:] for w in fleet.workers)
    assert seen and seen[-1][0] is SessionStatus.DONE, f"{seen[-3:]}\n{logs}"
    assert (SessionStatus.WAITING, True) in seen, "the parent waited while its verifier ran"
    assert terminal_state(pg, parent) == "completed"
    (kid,) = _verifiers(pg, parent)
    assert terminal_state(pg, kid.session_id) == "completed"
    (run,) = pg.runs_of(parent)
    (parked,) = _controls(pg, run.run_id, "parked")
    assert parked.payload["awaiting"] == [kid.session_id]
    (verdict,) = _controls(pg, run.run_id, "verifier_verdict")
    assert verdict.payload["verdict"] == "PASS"
    kid_run = pg.runs_of(kid.session_id)[-1]
    prompt = pg.events(kid_run.run_id)[0].payload["text"]
    assert "+++ b/src/a.py" in prompt, "the verifier was given the diff"


def test_a_parent_killed_after_starting_its_verifier_parks_on_the_same_one(
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
        extra_env={PAUSE_ENV: "start_verifier"},
    )
    try:
        worker = fleet.start_worker(name="pf", concurrency=2, pool="prefork")
        parent = submit(fleet.dispatcher(pg), _spec(), make_repo(tmp_path / "repo"))
        paused = wait_for(
            lambda: re.search(r"test pause after .* \(pid (\d+)\)", worker.text()),
            timeout=30,
            what="the parent's owner to pause after starting its verifier",
        )
        pid = int(paused.group(1))
        assert pid == owner_pid(leases(fleet, redis_server), parent) != worker.proc.pid
        (run,) = pg.runs_of(parent)
        assert len(_controls(pg, run.run_id, "verifier_started")) == 1
        assert not _controls(pg, run.run_id, "parked")
        os.kill(pid, signal.SIGKILL)
        wait_done(pg, parent, timeout=60)
        assert terminal_state(pg, parent) == "completed"
        (kid,) = _verifiers(pg, parent)
        (started,) = _controls(pg, run.run_id, "verifier_started")
        assert started.payload["child"] == kid.session_id
        (verdict,) = _controls(pg, run.run_id, "verifier_verdict")
        assert verdict.payload["verdict"] == "PASS"
        assert verdict.epoch > started.epoch, "adopted by a later owner"
        assert len(pg.runs_of(kid.session_id)) == 1
        assert worker.proc.poll() is None, "the pool parent lives on"
    finally:
        fleet.stop()
