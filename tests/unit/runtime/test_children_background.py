"""Background children, TaskOutput, resume and the parent-close policy (issue 13 part B).

DESIGN.md section 8.  One memory fleet with one slot (deliveries in
publish order), as in ``test_children.py``; parents are submitted with a
fixed run id so the scripts can name their children (uuid5 of run + call).
"""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.core.records import InboxLimits
from nahida_workers.ledger.children import child_ledger
from nahida_workers.runtime.children.report import child_report
from nahida_workers.runtime.children.spawn import child_id
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.ownership.outcome import SessionOutcome
from nahida_workers.testing.doubles import memory_runner, scripted_spec
from tests.unit.runtime.test_children import AGENTS, World, profile, results, task

RUN = "parentrun1"


@pytest.fixture
def w(ledger: Any) -> World:
    """A one-slot fleet over every ledger backend (memory, SQLite, PostgreSQL)."""
    return World(memory_runner(ledger=ledger))


def submit(w: World, turns: list[dict[str, Any]], **kw: Any) -> str:
    spec = scripted_spec(turns, tools=["Task"], agents=kw.pop("agents", AGENTS), **kw)
    session, _ = w.dispatcher.submit(spec, workspace="/tmp", run_id=RUN)
    return session.session_id


def terminal(ledger: Any, session_id: str) -> dict[str, Any]:
    run = ledger.runs_of(session_id)[-1]
    return dict(ledger.events(run.run_id)[-1].payload)


def test_background_call_returns_the_child_id_and_its_completion_arrives_as_input(w: World) -> None:
    bg = child_id(RUN, "call_bg")
    parent = submit(
        w,
        [
            {"text": "Start it.", "tool_calls": [task("call_bg", "alpha", mode="background")]},
            {"text": "Meanwhile.", "tool_calls": [task("call_fg", "beta")]},
            {
                "text": "Check it.",
                "tool_calls": [{"id": "out", "name": "TaskOutput", "arguments": {"task_id": bg}}],
            },
            {"text": "All done."},
        ],
    )
    w.pump()
    ledger = w.runner.ledger
    adopted = results(ledger, parent)
    assert [e.call_id for e in adopted] == ["call_bg", "call_fg", "out"]
    assert bg in adopted[0].payload["content"] and adopted[0].payload["status"] == "ok"
    receipts = {r.call_id: r for r in ledger.receipts(RUN)}
    assert receipts["call_bg"].evidence["child_session_id"] == bg
    assert receipts["call_bg"].evidence["mode"] == "background"
    # the completion: a background message the parent claimed as input, named by the child run
    inputs = [
        e.payload
        for e in ledger.events(RUN)
        if e.type is EventType.USER_INPUT and e.payload.get("source") == "inbox"
    ]
    assert len(inputs) == 1 and inputs[0]["kind"] == "background"
    bg_run = ledger.runs_of(bg)[-1].run_id
    assert inputs[0]["message_id"] == f"child-done:{bg}:{bg_run}"
    assert inputs[0]["text"] == (
        f"child {bg} (do call_bg) finished completed/answer_accepted (run {bg_run}): Alpha result."
    )
    assert '"status": "done"' in adopted[2].payload["content"]
    assert "Alpha result." in adopted[2].payload["content"]
    assert terminal(ledger, parent)["state"] == "completed"
    assert {m.status.value for m in ledger.inbox(parent)} == {"acknowledged"}


def test_task_output_reads_only_this_sessions_tree(w: World) -> None:
    parent = submit(
        w,
        [{"text": "go", "tool_calls": [task("call_a", "alpha")]}, {"text": "Done."}],
    )
    w.pump()
    ledger, kids = w.runner.ledger, child_ledger(w.runner.ledger)
    kid = child_id(RUN, "call_a")
    report = child_report(ledger, kids, parent, kid)
    assert not isinstance(report, str)
    assert report["status"] == "done" and report["final"]["text"] == "Alpha result."
    assert report["runs"][0]["state"] == "completed"
    for reader, target in [(kid, parent), (parent, "nope"), ("stranger", kid)]:
        assert isinstance(child_report(ledger, kids, reader, target), str)


def test_parent_answering_with_a_running_background_child_is_not_completed(w: World) -> None:
    bg = child_id(RUN, "call_bg")
    parent = submit(
        w,
        [
            {"text": "Start it.", "tool_calls": [task("call_bg", "alpha", mode="background")]},
            {"text": "Finished, I think."},
        ],
    )
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.FINISHED
    ledger = w.runner.ledger
    end = terminal(ledger, parent)
    assert (end["state"], end["reason"]) == ("incomplete", "children_unfinished")
    assert end["children_running"] == [bg]
    # parent_close: cancel (the default): the queued child is sealed cancelled by the
    # parent's seal at once, with no delivery (a ledger fact, DESIGN.md section 8)
    assert terminal(ledger, bg)["state"] == "cancelled"
    assert terminal(ledger, bg)["decided_by"] == "cancel"
    w.pump()
    assert terminal(ledger, bg)["state"] == "cancelled"


def test_allowed_unfinished_children_and_abandon_leave_the_child_running(w: World) -> None:
    agents = {**AGENTS, "keeper": {**profile({"text": "Kept."}), "parent_close": "abandon"}}
    bg = child_id(RUN, "call_bg")
    parent = submit(
        w,
        [
            {"text": "Start.", "tool_calls": [task("call_bg", "keeper", mode="background")]},
            {"text": "Done without waiting."},
        ],
        agents=agents,
        contract={"allow_unfinished_children": True},
    )
    w.pump()
    ledger = w.runner.ledger
    end = terminal(ledger, parent)
    assert end["state"] == "completed" and end["children_running"] == [bg]
    assert ledger.get_session(bg).cancel_requested_at is None
    assert terminal(ledger, bg)["state"] == "completed"
    # the parent is done: the completion waits in its inbox, it starts no new parent run
    assert [m.status.value for m in ledger.inbox(parent)] == ["pending"]
    assert len(ledger.runs_of(parent)) == 1


def test_background_completions_are_never_dropped_by_an_inbox_limit(w: World) -> None:
    w.runner.inbox_limits = InboxLimits(max_user=20, max_background=1, max_bytes=64 * 1024)
    calls = [task(f"call_{i}", "alpha", mode="background") for i in range(3)]
    parent = submit(
        w,
        [
            {"text": "Start.", "tool_calls": calls},
            {"text": "Wait.", "tool_calls": [task("call_fg", "beta")]},
            {"text": "Done."},
        ],
        contract={"allow_unfinished_children": True},
    )
    w.pump()
    ledger = w.runner.ledger
    background = [m for m in ledger.inbox(parent) if m.next_turn]
    assert len(background) == 3  # facts are never dropped by an inbox limit
    assert all(
        terminal(ledger, child_id(RUN, f"call_{i}"))["state"] == "completed" for i in range(3)
    )
    assert terminal(ledger, parent)["state"] == "completed"


def _submit_a_resume(w: World) -> tuple[str, str]:
    """A parent that starts child ``call_a`` with agent ``two``, then resumes it.

    Returns ``(child id, parent session id)``; agent ``two`` answers one run
    and then a second run.
    """
    kid = child_id(RUN, "call_a")
    agents = {
        **AGENTS,
        "two": {
            "tools": [],
            "provider": {
                "kind": "scripted",
                "script": {
                    "turns": [{"text": "First answer."}],
                    "next_runs": [[{"text": "Second answer."}]],
                },
            },
        },
    }
    parent = submit(
        w,
        [
            {"text": "go", "tool_calls": [task("call_a", "two")]},
            {"text": "again", "tool_calls": [task("call_r", "two", resume=kid)]},
            {"text": "Both done."},
        ],
        agents=agents,
    )
    return kid, parent


def test_resume_runs_the_childs_next_run_and_adopts_it(w: World) -> None:
    kid, parent = _submit_a_resume(w)
    w.pump()
    ledger = w.runner.ledger
    adopted = results(ledger, parent)
    assert [e.payload["content"] for e in adopted] == ["First answer.", "Second answer."]
    runs = ledger.runs_of(kid)
    assert len(runs) == 2 and all(r.terminal_state is not None for r in runs)
    receipts = {r.call_id: r for r in ledger.receipts(RUN)}
    assert receipts["call_r"].evidence["child_run_id"] == runs[1].run_id
    # the child's second run remembers its first (runtime/ownership/history.py)
    prompt = next(e for e in ledger.events(runs[1].run_id) if e.type is EventType.USER_INPUT)
    assert prompt.payload["text"] == "please call_r"
    assert terminal(ledger, parent)["state"] == "completed"
    assert len(child_ledger(ledger).children(parent)) == 1


def test_a_cancel_landing_while_the_parent_holds_its_lease_is_not_parked_on(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inbox.cancel re-dispatches nobody while the lease is held; parking would hide it."""
    from nahida_workers.runtime.commits.points import CommitPoints

    agents = {**AGENTS, "slow": profile({"text": "Slow."})}
    parent = submit(
        w, [{"text": "go", "tool_calls": [task("call_a", "slow")]}, {"text": "x"}], agents=agents
    )
    ledger, commit_turn = w.runner.ledger, CommitPoints.commit_turn

    def cancel_after_the_turn(self: Any, *args: Any, **kwargs: Any) -> Any:
        committed = commit_turn(self, *args, **kwargs)
        Inbox(ledger, w.runner.leases, w.dispatcher, w.runner.clock).cancel(parent)
        return committed

    monkeypatch.setattr(CommitPoints, "commit_turn", cancel_after_the_turn)
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.FINISHED  # sealed, not parked
    monkeypatch.setattr(CommitPoints, "commit_turn", commit_turn)
    assert terminal(ledger, parent)["state"] == "cancelled"
    kid = child_id(RUN, "call_a")
    # The cancel covered the subtree: the queued child was sealed by it at once.
    assert terminal(ledger, kid)["state"] == "cancelled"
    w.pump()
    assert terminal(ledger, kid)["state"] == "cancelled"


def test_cancelling_a_waiting_parent_cancels_its_children(w: World) -> None:
    agents = {**AGENTS, "slow": profile({"text": "Slow."})}
    parent = submit(
        w, [{"text": "go", "tool_calls": [task("call_a", "slow")]}, {"text": "x"}], agents=agents
    )
    first = w.queue.published.pop(0)[0]
    assert w.runner.run(first) is SessionOutcome.PARKED
    ledger = w.runner.ledger
    assert ledger.get_session(parent).status is SessionStatus.WAITING
    inbox = Inbox(ledger, w.runner.leases, w.dispatcher, w.runner.clock)
    published = len(w.queue.published)
    report = inbox.cancel(parent)
    kid = child_id(RUN, "call_a")
    # One operation, no worker slot: the queued child, then the waiting parent.
    assert report.sealed == (kid, parent) and report.flagged == ()
    assert len(w.queue.published) == published  # nothing re-dispatched: nothing to run
    assert terminal(ledger, parent)["state"] == "cancelled"
    assert terminal(ledger, kid)["state"] == "cancelled"
    assert w.runner.run(parent) is SessionOutcome.ALREADY_DONE
    w.pump()
    assert terminal(ledger, kid)["state"] == "cancelled"
    assert ledger.get_session(parent).status is SessionStatus.DONE


def test_a_resumed_child_left_done_with_its_prompt_pending_is_requeued(w: World) -> None:
    """resume_view -> CommitPoints.reopen_child: the parent never parks on a child nobody runs."""
    kid, parent = _submit_a_resume(w)
    ledger, resumed = w.runner.ledger, False
    while w.queue.published and not resumed:
        w.pump(limit=1)
        resumed = any(e.call_id == "call_r" for e in ledger.events(RUN))
    assert resumed and ledger.get_session(parent).status is SessionStatus.WAITING
    # the child's owner ended between its seal and the next-run check: its
    # delivery is gone and it reads done, with the resume prompt still pending
    w.queue.published[:] = [d for d in w.queue.published if d[0] != kid]
    with ledger.transaction() as tx:
        ledger.set_session_status(tx, kid, SessionStatus.DONE, at=w.runner.clock.now())
    w.dispatcher.redispatch(parent)
    w.pump()
    assert [e.payload["content"] for e in results(ledger, parent)] == [
        "First answer.",
        "Second answer.",
    ]
    assert len(ledger.runs_of(kid)) == 2
    assert terminal(ledger, parent)["state"] == "completed"
