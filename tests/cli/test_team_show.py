"""``nahida team show TEAM`` (DESIGN.md section 8): a team printed from the ledger only.

The team is made by the runtime itself on a SQLite ledger file (a lead and
two members settling a graph, run in this process); the command reads it
with ``--local --db FILE``, as a user does.
"""

from __future__ import annotations

import json
from pathlib import Path

from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.testing.doubles import memory_runner
from tests.cli.helpers import clean_env, nahida
from tests.unit.runtime.test_children import World
from tests.unit.runtime.test_teams import lead_turns, member, submit


def test_team_show_prints_members_states_and_the_graph_with_owners(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite3"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    w = World(memory_runner(ledger=SqlLedger(engine=engine)))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lead = submit(w, lead_turns(member("m1", "worker"), member("m2", "worker")), workspace)
    w.pump(limit=200)
    engine.dispose()
    env = clean_env()
    shown = nahida(["team", "show", lead[:8], "--local", "--db", str(db)], cwd=tmp_path, env=env)
    assert shown.code == 0, shown.output
    assert f"team {lead}: 4 tasks (0 open, 0 claimed, 4 done, 0 failed); settled" in shown.stdout
    for text in ("worker-2", "completed", "t4", "t2, t3"):
        assert text in shown.stdout
    as_json = nahida(
        ["team", "show", lead, "--local", "--db", str(db), "--json"], cwd=tmp_path, env=env
    )
    doc = json.loads(as_json.stdout)
    members = {m["member_id"]: m["name"] for m in doc["members"]}
    assert [members[t["owner"]] for t in doc["tasks"]] == [t["owner_name"] for t in doc["tasks"]]
    assert {t["owner_name"] for t in doc["tasks"]} <= {"worker", "worker-2"}
    history = nahida(
        ["team", "show", lead, "--local", "--db", str(db), "--history"], cwd=tmp_path, env=env
    )
    assert history.stdout.count("claimed") >= 4 and "claim history" in history.stdout
    missing = nahida(
        ["team", "show", "feedface", "--local", "--db", str(db)], cwd=tmp_path, env=env
    )
    assert missing.code == 2 and missing.one_error_line() == "error: no team feedface"
