"""Shared pieces of the real-process child-session tests (issue 13).

Profiles and polling helpers for ``test_children_crash.py``,
``test_children_b15.py`` and ``test_children_b22.py``: each starts real
``celery -A tasks worker`` processes (``nahida_workers/testing/fleet.py``)
over the real PostgreSQL and Redis, with beat off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.testing.fleet import LEASE_DB, Fleet, wait_for


def task(call_id: str, agent: str = "leaf", **extra: str) -> dict[str, Any]:
    """A foreground Task call of ``agent``."""
    args = {"description": f"work {call_id}", "prompt": f"Do {call_id}.", "agent": agent, **extra}
    return {"id": call_id, "name": "Task", "arguments": args}


def scripted(turns: list[dict[str, Any]], tools: list[str], **more: Any) -> dict[str, Any]:
    """A profile with a scripted provider."""
    return {"tools": tools, "provider": {"kind": "scripted", "script": {"turns": turns}}, **more}


def bash_leaf(command: str, answer: str = "Leaf done.") -> dict[str, Any]:
    """A leaf profile: one Bash call, then ``answer``."""
    call = {"id": "work", "name": "Bash", "arguments": {"command": command}}
    return scripted([{"text": "Working.", "tool_calls": [call]}, {"text": answer}], ["Bash"])


def leases(fleet: Fleet, redis_server: str) -> RedisLeaseStore:
    """The fleet's lease store (``lease:session:<id>`` under the fleet's prefix)."""
    return RedisLeaseStore.from_url(f"{redis_server}/{LEASE_DB}", key_prefix=fleet.prefix)


def owner_pid(store: RedisLeaseStore, session_id: str, *, timeout: float = 20) -> int:
    """The pid of the process holding the session's lease (``host:pid:...``)."""
    holder = wait_for(lambda: store.holder(session_id), timeout=timeout, what="a lease owner")
    return int(str(holder).split(":")[1])


def all_done(pg: SqlLedger, ids: list[str]) -> bool:
    """Whether every session in ``ids`` is ``done``."""
    return all((s := pg.get_session(i)) is not None and s.status is SessionStatus.DONE for i in ids)


def terminal_state(pg: SqlLedger, session_id: str) -> str:
    """The state of the session's last sealed run."""
    run = pg.runs_of(session_id)[-1]
    assert run.terminal_state is not None, f"{session_id}: last run not sealed"
    return run.terminal_state.value


def adopted_once_in_order(pg: SqlLedger, parent: str, calls: list[str]) -> list[Any]:
    """Assert one child per call (uuid5 ids) and one tool_result per call, in call order.

    Returns the tool_result events.
    """
    (run,) = pg.runs_of(parent)
    kids = child_ledger(pg).children(parent)
    assert sorted(k.session_id for k in kids) == sorted(child_id(run.run_id, c) for c in calls)
    events = pg.events(run.run_id)
    assert [e.call_id for e in events if e.type is EventType.TOOL_CALL] == calls
    results = [e for e in events if e.type is EventType.TOOL_RESULT]
    assert [e.call_id for e in results] == calls, "each result adopted once, in call order"
    receipts = {r.call_id: r for r in pg.receipts(run.run_id)}
    assert sorted(receipts) == sorted(calls)
    for call in calls:
        assert receipts[call].evidence["child_session_id"] == child_id(run.run_id, call)
    return results


def lines(path: Path) -> list[str]:
    """The lines of a marker file ([] when absent)."""
    return path.read_text().splitlines() if path.exists() else []
