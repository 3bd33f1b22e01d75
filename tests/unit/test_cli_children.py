"""Seeing subagents from the CLI: ``runs show`` children, ``nahida tree``, ``watch`` children.

DESIGN.md section 8 (issue 13 item 7).  A parent with two foreground children
(one of them with a child of its own) runs to its end on a SQLite ledger
file, in this thread (one slot); the CLI then reads that ledger file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from typer.testing import CliRunner

from nahida_workers.cli.main import app
from nahida_workers.ledger.children import child_ledger
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.observe.channel import RedisStreamSink
from nahida_workers.testing.doubles import ListTaskQueue, memory_runner, scripted_spec


def _task(call_id: str, agent: str) -> dict[str, Any]:
    args = {"description": f"area {call_id}", "prompt": f"do {call_id}", "agent": agent}
    return {"id": call_id, "name": "Task", "arguments": args}


def _profile(*turns: dict[str, Any], tools: list[str] | None = None) -> dict[str, Any]:
    return {
        "tools": tools or [],
        "provider": {"kind": "scripted", "script": {"turns": list(turns)}},
    }


AGENTS = {
    "leaf": _profile({"text": "Leaf result."}),
    "mid": _profile(
        {"text": "Delegating.", "tool_calls": [_task("call_leaf", "leaf")]},
        {"text": "Mid result."},
        tools=["Task"],
    ),
}


class Tree:
    """A parent -> (mid -> leaf, leaf) tree run to its end on a SQLite ledger file."""

    def __init__(self, tmp_path: Path, client: Any) -> None:
        self.db = tmp_path / "ledger.sqlite3"
        engine = make_engine(f"sqlite:///{self.db}")
        upgrade(engine)
        self.ledger = SqlLedger(engine=engine)
        runner = memory_runner(ledger=self.ledger)
        runner.sink = RedisStreamSink(client)
        queue = ListTaskQueue()
        dispatcher = Dispatcher(self.ledger, queue, runner.clock)
        runner.publish = dispatcher.publish
        spec = scripted_spec(
            [
                {
                    "text": "Fanning out.",
                    "tool_calls": [_task("call_a", "mid"), _task("call_b", "leaf")],
                },
                {"text": "All done."},
            ],
            tools=["Task"],
            agents=AGENTS,
        )
        session, _ = dispatcher.submit(spec, workspace=str(tmp_path))
        self.parent = session.session_id
        for _ in range(50):
            if not queue.published:
                break
            sid, _ = queue.published.pop(0)
            runner.run(sid)
        self.run_id = self.ledger.runs_of(self.parent)[-1].run_id


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    client = fakeredis.FakeRedis()
    monkeypatch.setenv("NAHIDA_ENV_FILE", "/dev/null")
    built = Tree(tmp_path, client)
    monkeypatch.setenv("NAHIDA_DATABASE_URL", f"sqlite:///{built.db}")
    monkeypatch.setenv("NAHIDA_REDIS_URL", "fakeredis://")
    # the watch command builds its own client: share this one's server
    monkeypatch.setattr(
        "nahida_workers.runtime.wiring.redis_client", lambda settings: client, raising=True
    )
    return built


def _invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_runs_show_lists_the_child_of_each_task_call_with_its_state(tree: Tree) -> None:
    data = json.loads(_invoke("runs", "show", tree.run_id, "--json").output)
    kids = data["children"]
    assert set(kids) == {"call_a", "call_b"}
    for call in ("call_a", "call_b"):
        assert kids[call]["session_id"] == child_id(tree.run_id, call)  # full id in --json
        assert kids[call]["state"] == "completed" and kids[call]["status"] == "done"
    assert kids["call_a"]["agent"] == "mid"
    text = _invoke("runs", "show", tree.run_id[:10]).output
    for call in ("call_a", "call_b"):
        assert f"child {child_id(tree.run_id, call)[:8]}" in text
    assert text.count("completed") >= 3  # the run and both children


def test_tree_json_is_one_nested_document_with_full_ids(tree: Tree) -> None:
    doc = json.loads(_invoke("tree", tree.parent[:6], "--json").output)
    assert doc["session_id"] == tree.parent and doc["state"] == "completed"
    assert [k["call_id"] for k in doc["children"]] == ["call_a", "call_b"]
    mid = doc["children"][0]
    assert mid["session_id"] == child_id(tree.run_id, "call_a") and mid["agent"] == "mid"
    mid_run = mid["runs"][-1]["run_id"]
    assert [g["session_id"] for g in mid["children"]] == [child_id(mid_run, "call_leaf")]
    assert mid["children"][0]["depth"] == 2 and mid["children"][0]["children"] == []
    assert all(len(r["run_id"]) == 32 for r in doc["runs"])
    assert doc["seconds"] is not None and doc["runs"][-1]["state"] == "completed"


def test_tree_table_shows_every_session_with_unique_prefixes(tree: Tree) -> None:
    text = _invoke("tree", tree.parent).output
    ids = [tree.parent, child_id(tree.run_id, "call_a"), child_id(tree.run_id, "call_b")]
    for sid in ids:
        assert sid[:8] in text
    assert text.count("completed") >= 4  # three sessions and one grandchild
    assert "agent mid" in text and "call call_leaf" in text


def test_tree_refuses_an_unknown_id(tree: Tree) -> None:
    result = CliRunner().invoke(app, ["tree", "ffffffff"])
    assert result.exit_code != 0


def test_watch_on_a_parent_prints_each_child_done(tree: Tree) -> None:
    lines = _invoke("watch", tree.parent, "--jsonl", "--timeout", "5").output.splitlines()
    rows = [json.loads(line) for line in lines]
    child_done = [r for r in rows if r.get("parent_id") == tree.parent]
    kids = {k.session_id for k in child_ledger(tree.ledger).children(tree.parent)}
    assert {r["session_id"] for r in child_done} == kids and len(child_done) == 2
    assert all(
        r["kind"] == "done" and r["data"]["terminal_state"] == "completed" for r in child_done
    )
    own = [r for r in rows if "parent_id" not in r]
    assert own[-1]["kind"] == "done" and own[-1]["session_id"] == tree.parent
