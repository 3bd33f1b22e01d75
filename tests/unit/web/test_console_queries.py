"""The console's paged, filtered reads on real ledgers (SQLite, PostgreSQL) the runtime wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.doubles import memory_runner
from nahida_workers.web import queries as q
from nahida_workers.web import trees
from tests.unit.runtime.test_children import World
from tests.unit.runtime.test_teams import lead_turns, member, submit


@pytest.fixture(params=["sqlite", "postgres"])
def sql_ledger(request: pytest.FixtureRequest) -> SqlLedger:
    """The same reads on both SQL dialects the ledger runs on."""
    name = "sqlite_ledger" if request.param == "sqlite" else "postgres_ledger"
    ledger: SqlLedger = request.getfixturevalue(name)
    return ledger


def test_team_lists_and_detail(sql_ledger: SqlLedger, tmp_path: Path) -> None:
    w = World(memory_runner(ledger=sql_ledger))
    lead = submit(w, lead_turns(member("m1", "worker"), member("m2", "worker")), tmp_path)
    w.pump(limit=200)
    page = trees.team_page(sql_ledger.reader)
    assert page.total == 1 and page.rows[0]["team_id"] == lead
    assert (page.rows[0]["members"], page.rows[0]["tasks"], page.rows[0]["open_tasks"]) == (3, 4, 0)
    detail = trees.team_detail(sql_ledger.reader, lead)
    assert detail is not None
    assert [(m["name"], m["state"]) for m in detail["members"]] == [
        ("lead", "completed"),
        ("worker", "completed"),
        ("worker-2", "completed"),
    ]
    assert [t["depends_on"] for t in detail["tasks"]] == [[], ["t1"], ["t1"], ["t2", "t3"]]
    assert trees.team_detail(sql_ledger.reader, "nope") is None
    # the lead's tree: its two members, by the Task calls that started them
    tree = trees.session_tree(sql_ledger.reader, lead)
    assert tree is not None and sorted(c.call_id or "" for c in tree.children) == ["m1", "m2"]
    assert all(c.state == "completed" for c in tree.children)
    kids = trees.children_by_call(sql_ledger.reader, lead)
    assert sorted(kids) == ["m1", "m2"] and all(len(v[0]["runs"]) >= 1 for v in kids.values())
    members = q.session_page(sql_ledger.reader, q.SessionFilter(parent=lead))
    assert members.total == 2


def test_sessions_page_and_filter_in_sql(sql_ledger: SqlLedger) -> None:
    w = World(memory_runner(ledger=sql_ledger))
    batch = w.dispatcher.create_batch("survey", {})
    spec = scripted_spec([{"text": "done"}])
    for i in range(q.PAGE_SIZE + 5):
        w.dispatcher.submit(spec, workspace=f"/tmp/ws{i}", batch_id=batch.batch_id)
    loose = w.submit(spec)
    w.pump(limit=3)  # three sessions complete; the rest stay queued
    engine = sql_ledger.reader
    first = q.session_page(engine, q.SessionFilter())
    assert (first.total, first.pages, len(first.rows)) == (q.PAGE_SIZE + 6, 2, q.PAGE_SIZE)
    second = q.session_page(engine, q.SessionFilter(), page=99)  # clamped to the last page
    assert (second.number, len(second.rows)) == (2, 6)
    ids = [r["session_id"] for r in first.rows + second.rows]
    assert len(set(ids)) == q.PAGE_SIZE + 6 and loose in ids  # every session once
    done = q.session_page(engine, q.SessionFilter(state="completed"))
    assert done.total == 3 and {r["state"] for r in done.rows} == {"completed"}
    queued = q.session_page(engine, q.SessionFilter(state="queued", job="survey"))
    assert queued.total == q.PAGE_SIZE + 5 - 3
    assert q.session_page(engine, q.SessionFilter(job="other")).total == 0
    assert q.state_counts(engine, q.SessionFilter(batch=batch.batch_id)) == {
        "completed": 3,
        "queued": q.PAGE_SIZE + 2,
    }
    batches = q.batch_page(engine, q.BatchFilter(job="survey"))
    row = batches.rows[0]
    assert (batches.total, row["sessions"], row["done"], row["schedule"]) == (
        1,
        q.PAGE_SIZE + 5,
        3,
        None,
    )
    assert q.batch_page(engine, q.BatchFilter(schedule="nope")).total == 0
