"""Workspace memory on real workers and PostgreSQL (docs/memory.md).

A first session remembers a quoted user preference (active) and an
inference (pending) through the ``Remember`` tool; a second session in the
same workspace is given the active item (noted as injected), a third in
another workspace is given nothing.  Every write goes through the worker's
fenced commit points on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.core.memory import MemoryStatus, Provenance
from nahida_workers.ledger.recall import recall_ledger
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, submit, wait_for
from tests.integration.children_world import all_done, terminal_state

pytestmark = pytest.mark.slow

FRENCH = {
    "id": "m1",
    "name": "Remember",
    "arguments": {
        "text": "Answer in French.",
        "kind": "preference",
        "provenance": "user",
        "quote": "answer in French",
    },
}
GUESS = {
    "id": "m2",
    "name": "Remember",
    "arguments": {"text": "The user is Canadian.", "kind": "fact", "provenance": "inference"},
}


def test_memory_written_by_one_session_is_given_to_the_next(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    fleet.start_worker(name="w1", concurrency=2, pool="threads")
    dispatcher = fleet.dispatcher(pg)
    first = scripted_spec(
        [{"tool_calls": [FRENCH, GUESS]}, {"text": "Noted."}],
        prompt="Please always answer in French.",
        memory=True,
        tools=[],
    )
    a = submit(dispatcher, first, ws)
    wait_for(lambda: all_done(pg, [a]), timeout=60, what="the first session")
    assert terminal_state(pg, a) == "completed"
    recall = recall_ledger(pg)
    items = {i.text: i for i in recall.items(workspace=str(ws))}
    assert items["Answer in French."].status is MemoryStatus.ACTIVE
    assert items["Answer in French."].provenance is Provenance.USER
    assert items["The user is Canadian."].status is MemoryStatus.PENDING
    later = scripted_spec([{"text": "Bonjour."}], memory=True, tools=[])
    b, c = submit(dispatcher, later, ws), submit(dispatcher, later, other)
    wait_for(lambda: all_done(pg, [b, c]), timeout=60, what="the later sessions")
    counts = recall.counts(workspace=str(ws))
    assert (counts["written_active"], counts["written_pending"], counts["injected"]) == (1, 1, 1)
    assert recall.counts(workspace=str(other))["injected"] == 0
