"""The model never sees a storage artefact (issue 10 item 5).

A prompt larger than the event payload cap is stored whole as a prompt
artifact (content-addressed by sha256, in the ledger); its event keeps head,
tail, sha256 and size; the provider sees a bounded excerpt and a
``ReadPromptArtifact`` tool that returns any part of it; a missing or
altered artifact fails the run before any provider call.  On every ledger
adapter: the in-memory twin, SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from nahida_workers.core.events import EventType
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall, UserMessage
from nahida_workers.ledger.memory import MemoryLedger
from nahida_workers.providers.payloads import anthropic_messages_body, openai_chat_body
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import ListTaskQueue, memory_runner, scripted_spec

#: About 1 MB of text, bigger than the 256 KiB payload cap, not ASCII only.
BIG = "".join(f"line {n:06d}: données — {'abcdefghij' * 9}\n" for n in range(9000))
SHA = hashlib.sha256(BIG.encode()).hexdigest()
MIDDLE = BIG.index("line 004500")


class Recording:
    """The scripted provider, remembering every request it was sent."""

    name = model = "scripted"

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.inner = ScriptedProvider(load_script({"turns": turns}))
        self.requests: list[ProviderRequest] = []

    def complete(self, request: ProviderRequest, **kw: Any) -> ProviderTurn:
        self.requests.append(request)
        return self.inner.complete(request, **kw)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return MemoryLedger()
    return request.getfixturevalue(f"{request.param}_ledger")


def start(ledger: Any, turns: list[dict[str, Any]], tmp_path: Path) -> tuple[Any, Recording, str]:
    provider = Recording(turns)
    runner = memory_runner(ledger=ledger, provider_for=lambda _spec: provider)
    dispatcher = Dispatcher(ledger, ListTaskQueue(), runner.clock)
    spec = scripted_spec([{"text": "unused"}], prompt=BIG, tools=("Read",))
    session, _ = dispatcher.submit(spec, workspace=str(tmp_path))
    return runner, provider, session.session_id


READ_MIDDLE = {
    "tool_calls": [
        {
            "id": "a1",
            "name": "ReadPromptArtifact",
            "arguments": {"artifact": SHA, "offset": MIDDLE, "length": 40},
        }
    ]
}


def test_a_large_prompt_is_an_artifact_the_model_reads_with_a_tool(
    any_ledger: Any, tmp_path: Path
) -> None:
    runner, provider, sid = start(
        any_ledger, [READ_MIDDLE, {"text": "Line 4500 is data."}], tmp_path
    )
    run = any_ledger.runs_of(sid)[0]
    prompt = any_ledger.events(run.run_id)[0]
    assert "artifact" in prompt.payload, "a large prompt is stored as an artifact"
    from nahida_workers.runtime.artifacts import HEAD_CHARS, TAIL_CHARS

    meta = prompt.payload["artifact"]
    assert meta["sha256"] == SHA and meta["size"] == len(BIG.encode()) and meta["chars"] == len(BIG)
    assert meta["head"] == BIG[:HEAD_CHARS] and meta["tail"] == BIG[-TAIL_CHARS:]
    assert isinstance(prompt.payload["text"], str), "the event holds a readable excerpt"
    assert any_ledger.get_artifact(SHA) == BIG.encode(), "stored whole"
    config = any_ledger.get_session(sid).config
    assert len(json.dumps(config)) < 20_000, "the config snapshot holds the excerpt, not a copy"

    runner.run(sid)
    first = provider.requests[0]
    (user,) = first.messages
    assert isinstance(user, UserMessage)
    assert "capped" not in user.text and "'sha256'" not in user.text  # no storage record
    assert len(user.text) < 8000, "a bounded excerpt"
    assert BIG[:200] in user.text and BIG[-200:] in user.text and SHA in user.text
    assert "ReadPromptArtifact" in [t.name for t in first.tools]
    for body in (openai_chat_body(first, model="m"), anthropic_messages_body(first, model="m")):
        assert len(json.dumps(body)) < 20_000
    results = [e for e in any_ledger.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert results[0].payload["status"] == "ok"
    assert BIG[MIDDLE : MIDDLE + 40] in results[0].payload["content"]
    receipt = next(r for r in any_ledger.receipts(run.run_id) if r.call_id == "a1")
    assert receipt.verification_status.value == "verified"  # checked against its sha256
    final = any_ledger.get_run(run.run_id)
    assert final.terminal_state.value == "completed"


def _tamper(ledger: Any) -> None:
    if isinstance(ledger, MemoryLedger):
        ledger.tables.artifacts[SHA] = b"something else"
        return
    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE prompt_artifacts SET content = :c"), {"c": b"something else"})


def _remove(ledger: Any) -> None:
    if isinstance(ledger, MemoryLedger):
        ledger.tables.artifacts.clear()
        return
    with ledger.engine.begin() as conn:
        conn.execute(text("DELETE FROM prompt_artifacts"))


@pytest.mark.parametrize("damage", [_tamper, _remove], ids=["tampered", "missing"])
def test_a_damaged_artifact_fails_the_run_before_the_provider_call(
    any_ledger: Any, damage: Callable[[Any], None], tmp_path: Path
) -> None:
    runner, provider, sid = start(any_ledger, [{"text": "never asked"}], tmp_path)
    damage(any_ledger)
    runner.run(sid)
    run = any_ledger.runs_of(sid)[0]
    assert (run.terminal_state.value, run.terminal_reason.value) == (
        "failed",
        "prompt_artifact_invalid",
    )
    assert run.failure_code.value == "prompt_artifact_invalid"
    assert provider.requests == [], "nothing was sent to the provider"


def test_the_tool_refuses_an_artifact_of_another_session(tmp_path: Path) -> None:
    other = "0" * 64
    call = ToolCall(call_id="x", name="ReadPromptArtifact", arguments={"artifact": other})
    turns = [{"tool_calls": [{"id": call.call_id, "name": call.name, "arguments": call.arguments}]}]
    ledger = MemoryLedger()
    ledger.put_artifact(b"not yours", at=datetime.now(UTC))
    runner, _provider, sid = start(ledger, [*turns, {"text": "Could not read it."}], tmp_path)
    runner.run(sid)
    run = ledger.runs_of(sid)[0]
    (result,) = [e for e in ledger.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    assert result.payload["status"] == "error" and "no prompt artifact" in result.payload["content"]


def test_a_small_prompt_is_sent_whole(tmp_path: Path) -> None:
    provider = Recording([{"text": "Hi."}])
    runner = memory_runner(provider_for=lambda _spec: provider)
    session, _ = Dispatcher(runner.ledger, ListTaskQueue(), runner.clock).submit(
        scripted_spec([{"text": "unused"}], prompt="hello", tools=("Read",)), workspace="."
    )
    runner.run(session.session_id)
    assert provider.requests[0].messages[0].text == "hello"  # type: ignore[union-attr]
    assert "ReadPromptArtifact" not in [t.name for t in provider.requests[0].tools]
