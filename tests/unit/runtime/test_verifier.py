"""The reserved verifier really runs: a child session the parent parks on (DESIGN.md section 6).

One fleet with one session slot (deliveries in publish order, as in
``test_children.py``), over every ledger backend (memory, SQLite,
PostgreSQL).  The verifier is a scripted child: its PASS or FAIL is a
StructuredOutput call its own completion pipeline accepted, read back by the
parent from the ledger.  The workspace is a git repository, so the
verifier's prompt carries the diff against the session's recorded base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.core.lineage import ChildLimits
from nahida_workers.core.policy.verification import VERDICT_SCHEMA
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.testing.doubles import memory_runner, scripted_spec
from nahida_workers.testing.fleet import make_repo
from tests.unit.runtime.test_children import World, profile

FILES = {"README.md": "# Demo\n", "src/app.py": "def main():\n    return 0\n"}


def verdict(verdict: str, *reasons: str) -> dict[str, Any]:
    """A scripted verifier provider that answers ``verdict``."""
    args = {"verdict": verdict, "reasons": list(reasons or ["checked the files"])}
    return {
        "kind": "scripted",
        "script": {
            "turns": [
                {"tool_calls": [{"id": "g", "name": "Glob", "arguments": {"pattern": "**/*"}}]},
                {"tool_calls": [{"id": "v", "name": "StructuredOutput", "arguments": args}]},
                {"text": "Verdict given."},
            ]
        },
    }


PROSE = {"kind": "scripted", "script": {"turns": [{"text": "PASS, looks good."}] * 3}}


def write(call_id: str, path: str, content: str = "x = 1\n") -> dict[str, Any]:
    return {"id": call_id, "name": "Write", "arguments": {"path": path, "content": content}}


THREE = {"tool_calls": [write("w1", "src/a.py"), write("w2", "src/b.py"), write("w3", "src/c.py")]}


@pytest.fixture
def w(ledger: Any) -> World:
    return World(memory_runner(ledger=ledger))


def submit(w: World, repo: Path, turns: list[dict[str, Any]], **kw: Any) -> str:
    kw.setdefault("tools", ["Read", "Write", "Edit", "Bash", "Task"])
    session, _ = w.dispatcher.submit(scripted_spec(turns, **kw), workspace=str(repo))
    return session.session_id


def events(w: World, session_id: str) -> list[Any]:
    return w.runner.ledger.events(w.runner.ledger.runs_of(session_id)[-1].run_id)


def controls(w: World, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [
        dict(e.payload.as_json())
        for e in events(w, session_id)
        if e.type is EventType.CONTROL and e.payload.get("kind") == kind
    ]


def verifiers(w: World, session_id: str) -> list[Any]:
    kids = child_ledger(w.runner.ledger).children(session_id)
    return [k for k in kids if k.config["contract"]["output_schema"] == VERDICT_SCHEMA]


def terminal(w: World, session_id: str) -> tuple[str, str]:
    payload = events(w, session_id)[-1].payload
    return str(payload["state"]), str(payload["reason"])


def test_the_verifier_runs_as_a_child_while_the_parent_is_parked(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    parent = submit(
        w,
        repo,
        [THREE, {"text": "Three modules are in place."}],
        verification={"provider": verdict("PASS", "a, b and c exist")},
    )
    w.pump(watch=parent)
    ledger = w.runner.ledger
    assert [o for _, o in w.outcomes][:1] == [SessionOutcome.PARKED]
    assert w.parent_states[0] is SessionStatus.WAITING  # parked while its verifier ran
    assert terminal(w, parent) == ("completed", "answer_accepted")
    (kid,) = verifiers(w, parent)
    # the reserved agent: read-only tools, the verdict as its required answer, its own lineage
    assert kid.config["tools"] == ["Read", "Glob", "Grep", "LS"]
    link = child_ledger(ledger).link(kid.session_id)
    assert link is not None and link.lineage["agent"] == "verifier"
    kid_run = ledger.runs_of(kid.session_id)[-1]
    assert kid_run.terminal_state is not None and kid_run.terminal_state.value == "completed"
    tools = [r.tool_name for r in ledger.receipts(kid_run.run_id)]
    assert tools == ["Glob", "StructuredOutput"]  # it looked, then answered
    # its prompt: the candidate, the triggers and the diff against the recorded base
    prompt = ledger.events(kid_run.run_id)[0].payload["text"]
    assert "Three modules are in place." in prompt and "files_changed:3" in prompt
    assert "+++ b/src/a.py" in prompt and "+x = 1" in prompt
    (base,) = controls(w, parent, "workspace_base")
    assert base["commit"] and len(base["commit"]) == 40
    (started,) = controls(w, parent, "verifier_started")
    assert started["child"] == kid.session_id and started["revision"] == 3
    assert started["triggers"] == ["files_changed:3"]
    (adopted,) = controls(w, parent, "verifier_verdict")
    assert (adopted["verdict"], adopted["reasons"]) == ("PASS", ["a, b and c exist"])
    assert controls(w, parent, "parked")[0]["awaiting"] == [kid.session_id]
    # the verifier's completion was consumed with the run, never shown as input
    assert {m.status.value for m in ledger.inbox(parent)} == {"acknowledged"}
    assert not [e for e in events(w, parent) if e.payload.get("source") == "inbox"]


def test_a_fail_is_fed_back_and_a_fresh_verifier_judges_the_fix(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    parent = submit(
        w,
        repo,
        [
            THREE,
            {"text": "Three modules are in place."},
            {"tool_calls": [write("w4", "src/c.py", "x = 3\n")]},
            {"text": "c.py is fixed."},
        ],
        verification={
            "provider": verdict("FAIL", "c.py repeats a.py"),
            "next_providers": [verdict("PASS")],
        },
    )
    w.pump()
    assert terminal(w, parent) == ("completed", "answer_accepted")
    first, second = verifiers(w, parent)
    assert first.session_id != second.session_id  # a fresh verifier, not a resumed one
    assert [s["revision"] for s in controls(w, parent, "verifier_started")] == [3, 4]
    assert [v["verdict"] for v in controls(w, parent, "verifier_verdict")] == ["FAIL", "PASS"]
    feedback = [e for e in events(w, parent) if e.payload.get("source") == "correction"]
    assert len(feedback) == 1 and "- c.py repeats a.py" in feedback[0].payload["text"]


def test_a_malformed_verdict_is_a_fail(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    parent = submit(
        w,
        repo,
        [THREE, {"text": "Three modules are in place."}, {"text": "They are in place."}],
        verification={"provider": PROSE},
    )
    w.pump()
    assert terminal(w, parent) == ("unverified", "verifier_rejected")
    (kid,) = verifiers(w, parent)
    kid_run = w.runner.ledger.runs_of(kid.session_id)[-1]
    assert kid_run.terminal_reason is not None
    assert kid_run.terminal_reason.value == "structured_output_missing"
    (adopted,) = controls(w, parent, "verifier_verdict")
    assert adopted["verdict"] == "FAIL" and adopted["malformed"] is True


def test_a_verifier_refused_by_a_limit_is_a_fail_never_a_wait(tmp_path: Path) -> None:
    runner = memory_runner()
    runner.child_limits = ChildLimits(max_depth=3, max_per_session=1, max_running_per_root=9)
    w = World(runner)
    repo = make_repo(tmp_path / "repo", FILES)
    task = {"description": "d", "prompt": "p", "agent": "leaf"}
    parent = submit(
        w,
        repo,
        [
            {"tool_calls": [{"id": "t", "name": "Task", "arguments": task}]},
            THREE,
            {"text": "Three modules are in place."},
            {"text": "They are in place."},
        ],
        agents={"leaf": profile({"text": "Leaf done."})},
        verification={"provider": verdict("PASS")},
    )
    w.pump()
    assert terminal(w, parent) == ("unverified", "verifier_rejected")
    assert verifiers(w, parent) == []
    (adopted,) = controls(w, parent, "verifier_verdict")
    assert adopted["verdict"] == "FAIL" and "could not start" in adopted["reasons"][0]


def test_a_repeated_delivery_never_starts_a_second_verifier(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    parent = submit(
        w,
        repo,
        [THREE, {"text": "Three modules are in place."}],
        verification={"provider": verdict("PASS")},
    )
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    assert w.runner.run(parent) is SessionOutcome.PARKED  # a duplicate delivery re-parks
    assert len(verifiers(w, parent)) == 1
    assert len(controls(w, parent, "verifier_started")) == 1
    w.pump()
    assert terminal(w, parent) == ("completed", "answer_accepted")
    assert len(verifiers(w, parent)) == 1


def test_cancelling_a_parent_parked_on_its_verifier_cancels_the_verifier(
    w: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    parent = submit(
        w,
        repo,
        [THREE, {"text": "Three modules are in place."}],
        verification={"provider": verdict("PASS")},
    )
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    report = Inbox(w.runner.ledger, w.runner.leases, w.dispatcher, w.runner.clock).cancel(parent)
    (kid,) = verifiers(w, parent)
    # The parked parent and its queued verifier: both sealed by the cancel, before it ran.
    assert report.sealed == (kid.session_id, parent)
    assert w.runner.run(parent) is SessionOutcome.ALREADY_DONE
    assert terminal(w, parent) == ("cancelled", "cancelled")
    w.pump()
    kid_run = w.runner.ledger.runs_of(kid.session_id)[-1]
    assert kid_run.terminal_state is not None and kid_run.terminal_state.value == "cancelled"


def test_the_diff_covers_a_commit_the_agent_made(w: World, tmp_path: Path) -> None:
    """The base is recorded before the first change: a commit made with Bash is in the diff."""
    repo = make_repo(tmp_path / "repo", FILES)
    commit = (
        "git -c user.name=a -c user.email=a@b add -A && "
        "git -c user.name=a -c user.email=a@b commit -qm 'new module'"
    )
    parent = submit(
        w,
        repo,
        [
            {"tool_calls": [write("w1", "src/new.py", "NEW = 1\n")]},
            {"tool_calls": [{"id": "b", "name": "Bash", "arguments": {"command": commit}}]},
            {"text": "The new module is committed."},
        ],
        verification={"provider": verdict("PASS")},
    )
    w.pump()
    assert terminal(w, parent) == ("completed", "answer_accepted")
    (started,) = controls(w, parent, "verifier_started")
    assert started["triggers"] == ["writing_bash"]
    (kid,) = verifiers(w, parent)
    prompt = w.runner.ledger.events(w.runner.ledger.runs_of(kid.session_id)[-1].run_id)[0]
    assert "+NEW = 1" in prompt.payload["text"]


def test_a_subagent_is_never_gated(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    worker = {
        "tools": ["Write", "Task"],
        "provider": {"kind": "scripted", "script": {"turns": [THREE, {"text": "Child wrote."}]}},
    }
    task = {"description": "d", "prompt": "p", "agent": "worker"}
    parent = submit(
        w,
        repo,
        [{"tool_calls": [{"id": "t", "name": "Task", "arguments": task}]}, {"text": "Delegated."}],
        agents={"worker": worker},
        verification={"provider": verdict("FAIL")},
    )
    w.pump()
    assert terminal(w, parent) == ("completed", "answer_accepted")
    (kid,) = child_ledger(w.runner.ledger).children(parent)
    assert terminal(w, kid.session_id) == ("completed", "answer_accepted")
    assert verifiers(w, kid.session_id) == [] and verifiers(w, parent) == []


def test_the_reserved_verifier_cannot_be_started_with_task(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    task = {"description": "d", "prompt": "p", "agent": "verifier"}
    parent = submit(
        w,
        repo,
        [{"tool_calls": [{"id": "t", "name": "Task", "arguments": task}]}, {"text": "Tried."}],
    )
    w.pump()
    result = next(e for e in events(w, parent) if e.type is EventType.TOOL_RESULT)
    assert result.payload["status"] == "error"
    assert "'verifier' agent is reserved" in result.payload["content"]
    assert child_ledger(w.runner.ledger).children(parent) == []


def test_goal_fail_then_continuation_then_pass(w: World, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    claim = {"id": "g", "name": "UpdateGoal", "arguments": {"status": "complete"}}
    parent = submit(
        w,
        repo,
        [
            {"tool_calls": [write("w1", "VERSION", "0\n")]},
            {"tool_calls": [claim]},
            {"text": "VERSION is written."},
            {"tool_calls": [write("w2", "VERSION", "1\n")]},
            {"tool_calls": [{**claim, "id": "g2"}]},
            {"text": "VERSION says 1."},
        ],
        tools=["Read", "Write"],
        goal="VERSION says 1",
        verification={
            "provider": verdict("FAIL", "VERSION says 0"),
            "next_providers": [verdict("PASS")],
        },
    )
    w.pump()
    assert terminal(w, parent) == ("completed", "answer_accepted")
    moves = [(g["from"], g["to"]) for g in controls(w, parent, "goal")]
    assert moves == [
        ("candidate", "verifying"),
        ("verifying", "rejected"),
        ("rejected", "active"),
        ("candidate", "verifying"),
        ("verifying", "complete"),
    ]
    continuation = [e for e in events(w, parent) if e.payload.get("source") == "correction"]
    assert len(continuation) == 1 and "- VERSION says 0" in continuation[0].payload["text"]
    assert len(verifiers(w, parent)) == 2
    assert [v["purpose"] for v in controls(w, parent, "verifier_verdict")] == ["goal", "goal"]
