"""Bounds hold inside one turn, and count only consecutive repeats (issue 10 item 6).

The repeat bound counts calls as they are executed: twenty identical calls
in one provider turn run 16 times (``action_stop_at``), the rest get a
recorded, paired error result, and the run ends ``incomplete/doom_loop``.
Only *consecutive* repeats count, and a successful result that shows
progress (a different output the model saw) breaks the streak, so a long
session that runs the same test command between edits is never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType, ToolStatus
from nahida_workers.testing import run_inline, scripted_spec


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def results(result: Any) -> list[Any]:
    return [e for e in result.events if e.type is EventType.TOOL_RESULT]


def controls(result: Any) -> list[str]:
    return [
        f"{e.payload.get('kind')}:{e.payload.get('bound', '')}"
        for e in result.events
        if e.type is EventType.CONTROL
    ]


@pytest.mark.parametrize(
    ("name", "arguments", "ok_field"),
    [
        ("Write", {"path": "out.txt", "content": "same"}, "bytes_written"),
        ("Read", {"path": "notes.txt"}, "sha256"),  # a parallel batch of read-only calls
    ],
)
def test_twenty_identical_calls_in_one_turn_run_sixteen_times(
    name: str, arguments: dict[str, Any], ok_field: str, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    turn = {"text": "", "tool_calls": [call(f"c{i}", name, **arguments) for i in range(20)]}
    result = run_inline(scripted_spec([turn, {"text": "Done."}], tools=("Read", "Write")), tmp_path)
    assert (result.terminal["state"], result.terminal["reason"]) == ("incomplete", "doom_loop")
    executed = [r for r in result.receipts if ok_field in r.evidence]
    assert len(executed) == 16, "past the stop bound a call must not run"
    got = results(result)
    assert [e.call_id for e in got] == [f"c{i}" for i in range(20)], "every call paired, in order"
    refused = got[16:]
    assert all(e.payload["status"] == ToolStatus.ERROR.value for e in refused)
    assert all(e.payload["reason"] == "doom_loop" for e in refused)
    assert "not run" in refused[0].payload["content"]
    # every call has exactly one receipt, the refused ones too (item 7)
    assert sorted(r.call_id for r in result.receipts) == sorted(f"c{i}" for i in range(20))
    assert sum(1 for e in result.events if e.type is EventType.ASSISTANT_OUTPUT) == 1


def test_the_same_test_command_between_edits_is_never_stopped(tmp_path: Path) -> None:
    """Twenty rounds of edit + the same pytest command: not consecutive, no doom loop."""
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b  # v0\n")
    test = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
    turns: list[dict[str, Any]] = []
    for n in range(20):
        edit = call(f"e{n}", "Edit", path="calc.py", old_string=f"# v{n}", new_string=f"# v{n + 1}")
        turns.append({"text": f"Edit {n}.", "tool_calls": [edit]})
        turns.append({"text": f"Test {n}.", "tool_calls": [call(f"t{n}", "Bash", command=test)]})
    turns.append({"text": "All twenty rounds pass."})
    spec = scripted_spec(turns, tools=("Edit", "Bash"), limits={"max_steps": 60})
    result = run_inline(spec, tmp_path)
    assert (result.terminal["state"], result.terminal["reason"]) == ("completed", "answer_accepted")
    assert "bound:repeated_action" not in controls(result)
    assert all(e.payload["status"] == "ok" for e in results(result)), "every edit and test ran"
    assert len(results(result)) == 40


def test_a_repeated_call_whose_output_changes_is_progress(tmp_path: Path) -> None:
    """Polling a status that changes (the same command, a different result each time)."""
    (tmp_path / "n").write_text("0")
    poll = "n=$(cat n); echo $((n+1)) > n; echo $n"
    turns: list[dict[str, Any]] = [
        {"text": "", "tool_calls": [call(f"p{i}", "Bash", command=poll)]} for i in range(20)
    ]
    turns.append({"text": "The counter reached 20."})
    spec = scripted_spec(turns, tools=("Bash",), limits={"max_steps": 30})
    result = run_inline(spec, tmp_path)
    assert (result.terminal["state"], result.terminal["reason"]) == ("completed", "answer_accepted")
    assert "bound:repeated_action" not in controls(result)


def test_the_same_output_repeated_across_turns_still_stops(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    turns = [
        {"text": "", "tool_calls": [call(f"r{i}", "Read", path="notes.txt")]} for i in range(20)
    ]
    result = run_inline(scripted_spec(turns, tools=("Read",)), tmp_path)
    assert (result.terminal["state"], result.terminal["reason"]) == ("incomplete", "doom_loop")
    assert len(results(result)) == 16
    assert controls(result).count("bound:repeated_action") == 1


def test_text_repeats_count_only_when_consecutive(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    turns = [
        {"text": "Looking." if i % 2 == 0 else "Checking.", "tool_calls": [call(f"r{i}", "LS")]}
        for i in range(6)
    ]
    result = run_inline(scripted_spec([*turns, {"text": "Two files."}], tools=("LS",)), tmp_path)
    assert "bound:repeated_text" not in controls(result)
    again = [{"text": "Looking.", "tool_calls": [call(f"r{i}", "LS")]} for i in range(3)]
    result = run_inline(scripted_spec([*again, {"text": "Two files."}], tools=("LS",)), tmp_path)
    assert controls(result).count("bound:repeated_text") == 1
