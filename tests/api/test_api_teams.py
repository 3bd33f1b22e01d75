"""``GET /v1/teams/{team_id}`` on a real ``nahida serve`` (DESIGN.md section 8).

The team is made by the runtime itself (a lead and two members settling a
graph, run in this process on the same PostgreSQL ledger); the server only
reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.doubles import memory_runner
from tests.api.conftest import Server
from tests.unit.runtime.test_children import World
from tests.unit.runtime.test_teams import lead_turns, member, submit

pytestmark = pytest.mark.slow


def test_a_team_is_shown_from_the_ledger(server: Server, pg: SqlLedger, tmp_path: Path) -> None:
    w = World(memory_runner(ledger=pg))
    lead = submit(w, lead_turns(member("m1", "worker"), member("m2", "worker")), tmp_path)
    w.pump(limit=200)
    with server.client() as client:
        got = client.get(f"/v1/teams/{lead[:8]}")
        assert got.status_code == 200, got.text
        doc = got.json()
        assert doc["team_id"] == lead and doc["settled"] is True
        assert doc["counts"] == {"open": 0, "claimed": 0, "done": 4, "failed": 0}
        assert [(m["name"], m["role"], m["state"]) for m in doc["members"]] == [
            ("lead", "lead", "completed"),
            ("worker", "member", "completed"),
            ("worker-2", "member", "completed"),
        ]
        ids = {m["member_id"] for m in doc["members"]}
        assert all(t["owner"] in ids and t["status"] == "done" for t in doc["tasks"])
        assert [t["depends_on"] for t in doc["tasks"]] == [[], ["t1"], ["t1"], ["t2", "t3"]]
        assert [e["action"] for e in doc["history"]].count("claimed") == 4
        missing = client.get("/v1/teams/ffffffffffff")
        assert missing.status_code == 404
        assert "/v1/teams/{team_id}" in client.get("/openapi.json").json()["paths"]
