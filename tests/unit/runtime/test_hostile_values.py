"""A model that sends odd bytes: the run ends honestly on every ledger (issue 11 items 3, 4).

NUL bytes in model text and in tool output, a lone surrogate in a Bash
command, a 300-character call id and tool name.  On PostgreSQL these failed
the run (after retrying it as if the database were down); a lone surrogate
let the Bash run and then lost its receipt.  The same run must complete on
the memory twin, SQLite and PostgreSQL, every call answered with a receipt,
and no call whose input cannot be stored may run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nahida_workers.core.events import EventType
from nahida_workers.ports import Ledger
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec

LONG_ID = "call_" + "9" * 295
LONG_NAME = "Tool" * 75


def _hostile_turns(workspace: Path) -> list[dict[str, Any]]:
    return [
        {
            "text": "thinking \x00 hard",
            "tool_calls": [
                {"id": LONG_ID, "name": "Bash", "arguments": {"command": "printf 'a\\0b'"}},
                # \udcff would reach the shell as byte 0xff: the file would be made
                {"id": "odd", "name": "Bash", "arguments": {"command": "touch made-\udcff"}},
                {"id": "nameless", "name": LONG_NAME, "arguments": {}},
            ],
        },
        {"text": "Done \x00 now."},
    ]


def test_a_hostile_turn_runs_to_an_honest_end_on_every_ledger(
    ledger: Ledger[Any], tmp_path: Path
) -> None:
    turns = _hostile_turns(tmp_path)
    runner = memory_runner(
        ledger=ledger, provider_for=lambda _spec: ScriptedProvider(load_script({"turns": turns}))
    )
    spec = scripted_spec([{"text": "unused"}], tools=["Bash"], prompt="go \x00 now")
    session, _ = Dispatcher(ledger, ListTaskQueue(), runner.clock).submit(
        spec, workspace=str(tmp_path)
    )
    runner.run(session.session_id)

    (run,) = ledger.runs_of(session.session_id)
    assert run.terminal_state is not None and run.terminal_state.value == "completed"
    events = ledger.events(run.run_id)
    calls = [e for e in events if e.type is EventType.TOOL_CALL]
    results = {e.call_id: e.payload for e in events if e.type is EventType.TOOL_RESULT}
    receipts = {r.call_id: r for r in ledger.receipts(run.run_id)}
    assert len(calls) == 3 and set(results) == set(receipts) == {c.call_id for c in calls}

    long_call = calls[0]
    assert long_call.call_id is not None and len(long_call.call_id) <= 200
    assert long_call.payload["original_call_id"] == LONG_ID
    assert results[long_call.call_id]["status"] == "ok"
    # Output with a NUL byte is a byte summary (issue 23 item 3), nothing to sanitise.
    content = results[long_call.call_id]["content"]
    assert "[binary output: 3 bytes, sha256 " in content and "|a.b|" in content
    assert "\x00" not in content

    odd = results["odd"]
    assert odd["status"] == "error" and "not run" in odd["content"]
    assert receipts["odd"].evidence["error_code"] == "invalid_arguments"
    assert not list(tmp_path.glob("made-*")), "a call whose input cannot be stored ran"

    nameless = calls[2]
    assert len(nameless.payload["name"]) <= 200 and nameless.payload["original_name"] == LONG_NAME
    assert results[nameless.call_id]["status"] == "error"

    assert events[0].payload["text"] == "go \ufffd now"
    assert any(e.payload.get("code") == "call_unstorable" for e in events)


def test_a_job_file_with_nul_bytes_is_a_clear_error_or_a_storable_prompt(tmp_path: Path) -> None:
    import pytest

    from nahida_workers.errors import ConfigError
    from nahida_workers.runtime.spec import load_job

    raw_nul = tmp_path / "raw.yaml"
    raw_nul.write_bytes(b"prompt: a\x00b\nprovider: {kind: scripted, script: {turns: []}}\n")
    with pytest.raises(ConfigError, match=r"raw\.yaml"):
        load_job(raw_nul)
    not_utf8 = tmp_path / "latin1.yaml"
    not_utf8.write_bytes(b"prompt: caf\xe9\nprovider: {kind: scripted, script: {turns: []}}\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml"):
        load_job(not_utf8)
    escaped = tmp_path / "escaped.yaml"  # YAML's "\0" escape is a real NUL in the prompt
    escaped.write_text('prompt: "a\\0b"\nprovider: {kind: scripted, script: {turns: []}}\n')
    assert load_job(escaped).prompt == "a\x00b"  # stored as U+FFFD by every ledger (above)
