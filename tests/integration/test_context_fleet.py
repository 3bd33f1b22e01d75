"""The agent's context on real workers and PostgreSQL (docs/concepts/context.md).

A trusted session on a real worker reads AGENTS.md once, commits it as the
run's ``context`` control in PostgreSQL (provenance intact after the round
trip through the ledger's JSON), and every provider call carries it -- the
scripted provider checks each request (``expect``) and fails the run if the
system text lacks it.  An untrusted session in the same workspace never
sees it.  A long session gets its self-check before turn 5.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.context import CONTEXT_KIND
from nahida_workers.core.events import EventType
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, submit, wait_for
from tests.integration.children_world import all_done, terminal_state

pytestmark = pytest.mark.slow

AGENTS = b"Run `make check` before every commit.\n"
SEES = {"system_contains": ["## AGENTS.md (38 bytes", "Run `make check` before every commit."]}
BLIND = {"system_lacks": ["make check"]}


def _controls(pg: SqlLedger, session_id: str, kind: str) -> list[dict[str, Any]]:
    (run,) = pg.runs_of(session_id)
    return [
        dict(e.payload)
        for e in pg.events(run.run_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == kind
    ]


def test_a_trusted_workspace_s_instructions_reach_every_turn_on_a_real_worker(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    (tmp_path / "AGENTS.md").write_bytes(AGENTS)
    fleet.start_worker(name="w1", concurrency=2, pool="threads")
    fleet.start_worker(name="t1", queues="tools", concurrency=2)  # Read fans out to it
    dispatcher = fleet.dispatcher(pg)
    read = {"tool_calls": [{"id": "r", "name": "Read", "arguments": {"path": "AGENTS.md"}}]}
    trusted = scripted_spec(
        [{**read, "expect": SEES}] * 5
        + [
            {
                "text": "AGENTS.md asks for make check.",
                "expect": {**SEES, "last_user_contains": ["[runtime self-check"]},
            }
        ],
        trust_workspace=True,
        tools=["Read"],
    )
    untrusted = scripted_spec([{"text": "No instructions.", "expect": BLIND}], tools=["Read"])
    a, b = submit(dispatcher, trusted, tmp_path), submit(dispatcher, untrusted, tmp_path)
    wait_for(lambda: all_done(pg, [a, b]), timeout=90, what="both sessions")
    assert terminal_state(pg, a) == "completed"  # every expect held: 6 provider calls
    assert terminal_state(pg, b) == "completed"
    (context,) = _controls(pg, a, CONTEXT_KIND)
    (entry,) = context["instructions"]
    assert entry["sha256"] == hashlib.sha256(AGENTS).hexdigest()
    assert (entry["path"], entry["size"], entry["truncated"]) == ("AGENTS.md", 38, False)
    assert _controls(pg, a, "self_check") == [{"kind": "self_check", "turn": 5}]
    assert _controls(pg, b, CONTEXT_KIND) == []
