"""SIGTERM to a session worker hands its session over at once (DESIGN.md section 8).

Real ``celery -A tasks worker`` processes -- the owner in the ``threads`` and
in the ``prefork`` pool, the two pools the fleet runs -- over the real Redis
and PostgreSQL.  The owner gets SIGTERM while its first Bash command runs:

* the command finishes and its result commits (no tool is killed), the next
  exclusive call of the turn does not start, a ``handover`` event names it,
  the lease is released and the message goes back to the queue;
* the other worker continues at once: its first ledger event lands well under
  the lease TTL after the SIGTERM (a SIGKILLed owner's session waits for the
  TTL; ``bench/handover.py`` measures both);
* a copy of the original message (``acks_late`` redelivery) published during
  the handover runs nothing: every command ran exactly once, nothing was lost;
* the SIGTERMed worker exits by itself, cleanly.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from nahida_workers.celery.app import CeleryTaskQueue
from nahida_workers.celery.config import celery_config
from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done, wait_for

pytestmark = pytest.mark.slow

LEASE_TTL_S = 20.0


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _bash(call_id: str, command: str) -> dict[str, Any]:
    return {"id": call_id, "name": "Bash", "arguments": {"command": command}}


def handover_spec(marker: Path, *, first_s: float = 1.5) -> Any:
    """c1 (runs ``first_s``) then c2 in one turn (two exclusive batches), c3 in the next."""
    first = f"echo c1-start >> {marker}; sleep {first_s}; echo c1-end >> {marker}"
    return scripted_spec(
        [
            {
                "text": "two steps",
                "tool_calls": [_bash("c1", first), _bash("c2", f"echo c2 >> {marker}")],
            },
            {"text": "one more", "tool_calls": [_bash("c3", f"echo c3 >> {marker}")]},
            {"text": "Done."},
        ],
        tools=("Bash",),
    )


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_sigterm_mid_bash_hands_the_session_over_at_once_and_runs_nothing_twice(
    pool: str, postgres_url: str, redis_server: str, pg: SqlLedger, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(
        postgres_url, redis_server, logs, lease_ttl_s=LEASE_TTL_S, visibility_timeout_s=60
    )
    try:
        workers = [fleet.start_worker(name=f"w{i}", concurrency=2, pool=pool) for i in (1, 2)]
        repo = make_repo(tmp_path / "repo")
        marker = repo / "marker.txt"  # inside the workspace: Bash writes nowhere else
        dispatcher = fleet.dispatcher(pg)
        sid = submit(dispatcher, handover_spec(marker), repo)
        wait_for(lambda: _lines(marker), timeout=30, what="c1 to start")
        owner, heir = sorted(workers, key=lambda w: f"session {sid}: run" not in w.text())

        owner.kill(signal.SIGTERM)
        sigterm_at = time.time()
        (run,) = pg.runs_of(sid)
        first = wait_for(
            lambda: next((e for e in pg.events(run.run_id) if e.epoch == 2), None),
            timeout=LEASE_TTL_S,
            what="the heir's first ledger event",
        )
        handover_s = first.created_at.timestamp() - sigterm_at
        # A copy of the original message (the broker's redelivery of an
        # acks_late task) arrives while the heir owns the session.
        _publish_copy(fleet, sid, owner.text())
        wait_done(pg, sid, timeout=60)

        assert handover_s < LEASE_TTL_S / 4, f"handover took {handover_s:.2f}s"
        assert owner.proc.wait(timeout=30) == 0, owner.text()[-3000:]
        assert _lines(marker) == ["c1-start", "c1-end", "c2", "c3"], "each command ran once"
        events = pg.events(run.run_id)
        handovers = [e for e in events if e.payload.get("kind") == "handover"]
        assert [(h.epoch, h.payload["unstarted"]) for h in handovers] == [(1, ["c2"])]
        results = {e.call_id: e for e in events if e.type is EventType.TOOL_RESULT}
        assert results["c1"].epoch == 1 and results["c1"].payload["status"] == ToolStatus.OK.value
        assert results["c2"].epoch == 2 and results["c2"].payload["status"] == ToolStatus.OK.value
        assert not any(e.payload.get("synthetic") for e in results.values())
        assert sorted(r.call_id for r in pg.receipts(run.run_id)) == ["c1", "c2", "c3"]
        (recovery,) = [e for e in events if e.payload.get("kind") == "recovery"]
        assert recovery.payload["resumed"] == ["c2"] and recovery.payload["closed"] == []
        assert run.run_id == pg.runs_of(sid)[0].run_id
        assert pg.runs_of(sid)[0].terminal_state.value == "completed"  # type: ignore[union-attr]
        assert pg.get_session(sid).lease_epoch == 2, "one handover, no other owner"  # type: ignore[union-attr]
        wait_for(
            lambda: re.search(r"(lease_held|already_done)", heir.text()),
            timeout=30,
            what="the copy to be acked as a no-op",
        )
    finally:
        fleet.stop()


def _publish_copy(fleet: Fleet, sid: str, owner_log: str) -> None:
    """Publish ``run_session(sid)`` again under the original message's task id."""
    found = re.search(r"Task nahida\.run_session\[([^\]]+)\] received", owner_log)
    assert found, owner_log[-2000:]
    app = Celery("handover-copy", set_as_current=False)
    app.conf.update(celery_config(fleet.settings()))
    try:
        CeleryTaskQueue(app).publish_session(sid, task_id=found.group(1))
    finally:
        app.close()
