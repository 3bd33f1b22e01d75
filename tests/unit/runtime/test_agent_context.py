"""The agent's context through the runtime (issue 23 item 4).

A session runs in-process (memory ledger, real tools, a scripted provider
that records each request) and the tests look at what the provider got and
what the ledger holds: the base prompt first, the repository's instruction
files only for a trusted workspace (read once per run, with provenance,
never out of the workspace), the job's prompt last; a stable prefix, byte
for byte, from one turn to the next in both wire formats; the named
``tool_choice`` and the execution summary in both wire formats; tool
profiles checked where a job is checked.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from nahida_workers.core.context import BASE_PROMPT, CONTEXT_KIND
from nahida_workers.core.events import EventType
from nahida_workers.core.loop import CallProvider, Signals, decide
from nahida_workers.core.messages import (
    AssistantMessage,
    ProviderRequest,
    ProviderTurn,
    ToolCall,
    ToolResultMessage,
    ToolSchema,
    UserMessage,
)
from nahida_workers.core.state import RunState
from nahida_workers.errors import ConfigError
from nahida_workers.providers.payloads import anthropic_messages_body, openai_chat_body
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.ownership.driver import loop_config
from nahida_workers.runtime.spec import SessionSpec, load_job
from nahida_workers.runtime.wiring import registry_for
from nahida_workers.settings import Settings
from nahida_workers.testing import InlineResult, memory_runner, run_inline, scripted_spec

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]
AGENTS = b"Run `make check` before every commit.\n"


class Recording(ScriptedProvider):
    """The scripted provider, keeping every request it answered."""

    def __init__(self, spec: SessionSpec) -> None:
        super().__init__(load_script(spec.provider["script"]))
        self.requests: list[ProviderRequest] = []

    def complete(self, request: ProviderRequest, **kwargs: Any) -> ProviderTurn:
        self.requests.append(request)
        return super().complete(request, **kwargs)


def run(spec: SessionSpec, workspace: Path) -> tuple[InlineResult, list[ProviderRequest]]:
    providers: list[Recording] = []

    def provider_for(s: SessionSpec) -> Recording:
        providers.append(Recording(s))
        return providers[-1]

    runner = memory_runner(
        provider_for=provider_for, registry_for=lambda s: registry_for(s, SETTINGS)
    )
    result = run_inline(spec, workspace, runner=runner)
    return result, [r for p in providers for r in p.requests]


def contexts(result: InlineResult) -> list[dict[str, Any]]:
    return [
        dict(e.payload)
        for e in result.events
        if e.type is EventType.CONTROL and e.payload.get("kind") == CONTEXT_KIND
    ]


READ_THEN_WRITE_THEN_ANSWER = [
    {"tool_calls": [{"id": "r", "name": "Read", "arguments": {"path": "AGENTS.md"}}]},
    {
        "tool_calls": [
            {"id": "w", "name": "Write", "arguments": {"path": "AGENTS.md", "content": "changed"}}
        ]
    },
    {"text": "AGENTS.md asks for make check; I changed it."},
]


def test_a_trusted_workspace_s_agents_md_is_read_once_per_run_with_provenance(
    tmp_path: Path,
) -> None:
    (tmp_path / "AGENTS.md").write_bytes(AGENTS)
    spec = scripted_spec(
        READ_THEN_WRITE_THEN_ANSWER, trust_workspace=True, system_prompt="Be brief."
    )
    result, requests = run(spec, tmp_path)
    assert result.terminal["state"] == "completed"
    (context,) = contexts(result)
    (entry,) = context["instructions"]
    assert entry["path"] == "AGENTS.md" and entry["size"] == len(AGENTS)
    assert entry["sha256"] == hashlib.sha256(AGENTS).hexdigest()
    assert context["missing"] == []
    kinds = [e.type for e in result.events]
    first_turn = kinds.index(EventType.ASSISTANT_OUTPUT)
    context_at = next(i for i, e in enumerate(result.events) if e.payload.get("kind") == "context")
    assert context_at < first_turn  # committed before the first provider call
    systems = {r.system for r in requests}
    assert len(requests) == 3 and len(systems) == 1  # the Write did not change the prompt
    (system,) = systems
    assert system is not None and system.startswith(BASE_PROMPT)
    assert (
        system.index("## AGENTS.md")
        < system.index("Run `make check`")
        < system.index("# Job instructions\n\nBe brief.")
    )


def test_an_untrusted_workspace_s_instruction_files_are_never_read(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(AGENTS)
    result, requests = run(scripted_spec([{"text": "Hello."}]), tmp_path)
    assert contexts(result) == []
    assert requests[0].system is not None and "make check" not in requests[0].system


def test_the_instruction_files_are_configurable_and_confined_to_the_workspace(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("SECRET outside the workspace\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "CONTRIBUTING.md").write_text("Sign your commits.\n")
    (ws / "AGENTS.md").write_bytes(AGENTS)
    (ws / "LINKED.md").symlink_to(outside)
    spec = scripted_spec(
        [{"text": "Hello."}],
        trust_workspace=True,
        instruction_files=["CONTRIBUTING.md", "LINKED.md", "NOPE.md", "AGENTS.md"],
    )
    result, requests = run(spec, ws)
    (context,) = contexts(result)
    assert [i["path"] for i in context["instructions"]] == ["CONTRIBUTING.md", "AGENTS.md"]
    assert context["missing"] == ["LINKED.md", "NOPE.md"]
    system = requests[0].system or ""
    assert system.index("Sign your commits.") < system.index("make check")
    assert "SECRET" not in system
    for bad in (["../x.md"], ["/etc/passwd"], [""]):
        with pytest.raises(ValidationError, match="relative path inside the workspace"):
            scripted_spec([{"text": "x"}], instruction_files=bad)


def _bodies(request: ProviderRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        openai_chat_body(request, model="m"),
        anthropic_messages_body(request, model="m"),
    )


def test_the_stable_prefix_is_byte_identical_from_turn_to_turn(tmp_path: Path) -> None:
    """Prompt-cache friendly: system, tools and the transcript so far never change."""
    (tmp_path / "AGENTS.md").write_bytes(AGENTS)
    spec = scripted_spec(READ_THEN_WRITE_THEN_ANSWER, trust_workspace=True, system_prompt="job")
    _result, requests = run(spec, tmp_path)
    assert len(requests) == 3
    for earlier, later in itertools.pairwise(requests):
        for before, after in zip(_bodies(earlier), _bodies(later), strict=True):
            for key in ("system", "tools", "tool_choice", "model"):
                assert json.dumps(before.get(key)).encode() == json.dumps(after.get(key)).encode()
            old, new = before["messages"], after["messages"]
            # Anthropic merges a turn's tool results into the next user message, so the
            # last message may grow; every message before it is byte-identical.
            assert [json.dumps(m) for m in old[:-1]] == [json.dumps(m) for m in new[: len(old) - 1]]
            assert json.dumps(new[len(old) - 1]).startswith(json.dumps(old[-1])[:-2])


def test_a_resumed_run_sends_the_same_system_text(tmp_path: Path) -> None:
    """Another worker rebuilds the state from the ledger: the prompt is the ledger's."""
    (tmp_path / "AGENTS.md").write_bytes(AGENTS)
    spec = scripted_spec(READ_THEN_WRITE_THEN_ANSWER, trust_workspace=True)
    result, requests = run(spec, tmp_path)
    assert (tmp_path / "AGENTS.md").read_text() == "changed"
    before_last_turn = [e for e in result.events][: _index_of_turn(result, 2)]
    state = RunState.from_ledger(result.run.run_id, before_last_turn)
    config = loop_config(spec, registry_for(spec, SETTINGS))
    decision = decide(state, config, Signals(now=result.events[-1].created_at))
    assert isinstance(decision, CallProvider)
    assert decision.request.system == requests[2].system


def _index_of_turn(result: InlineResult, n: int) -> int:
    turns = [i for i, e in enumerate(result.events) if e.type is EventType.ASSISTANT_OUTPUT]
    return turns[n]


def test_a_self_check_reaches_the_model_as_a_runtime_message(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    read = {"tool_calls": [{"id": "r", "name": "Read", "arguments": {"path": "a.txt"}}]}
    spec = scripted_spec([read] * 5 + [{"text": "a.txt holds a."}])
    result, requests = run(spec, tmp_path)
    assert result.terminal["state"] == "completed"
    last = requests[5].messages[-1]
    assert isinstance(last, UserMessage) and last.text.startswith("[runtime self-check")
    assert all("self-check" not in str(m) for r in requests[:5] for m in r.messages)
    sources = [e.payload.get("source") for e in result.events if e.type is EventType.USER_INPUT]
    assert sources == ["prompt", "self_check"]


# -- the wire formats ---------------------------------------------------------------------------

TOOLS = (
    ToolSchema(name="Read", description="read", input_schema={"type": "object"}),
    ToolSchema(name="StructuredOutput", description="answer", input_schema={"type": "object"}),
)


def test_a_named_tool_choice_in_both_wire_formats() -> None:
    request = ProviderRequest(
        run_id="r",
        turn_index=1,
        messages=(UserMessage(text="go"),),
        tools=TOOLS,
        tool_name="StructuredOutput",
    )
    openai, anthropic = _bodies(request)
    assert openai["tool_choice"] == {"type": "function", "function": {"name": "StructuredOutput"}}
    assert anthropic["tool_choice"] == {"type": "tool", "name": "StructuredOutput"}
    # a server that cannot name a tool gets "required" (OpenAI) / "any" (Anthropic)
    assert (
        openai_chat_body(request, model="m", named_tool_choice=False)["tool_choice"] == "required"
    )
    assert anthropic_messages_body(request, model="m", named_tool_choice=False)["tool_choice"] == {
        "type": "any"
    }
    unoffered = request.model_copy(update={"tools": TOOLS[:1]})
    assert openai_chat_body(unoffered, model="m")["tool_choice"] == "required"
    plain = request.model_copy(update={"tool_name": None})
    assert _bodies(plain)[0]["tool_choice"] == "auto"


def test_a_provider_without_tool_calling_gets_the_summary_not_tool_messages() -> None:
    call = ToolCall(call_id="c1", name="Read", arguments={"path": "a.txt"})
    request = ProviderRequest(
        run_id="r",
        turn_index=2,
        messages=(
            UserMessage(text="read a.txt"),
            AssistantMessage(text="", tool_calls=(call,)),
            ToolResultMessage(call_id="c1", name="Read", content="hello"),
            UserMessage(text="and now?"),
        ),
        tools=TOOLS,
    )
    openai = openai_chat_body(request, model="m", supports_tools=False)
    assert "tools" not in openai and "tool_choice" not in openai
    assert [m["role"] for m in openai["messages"]] == ["user", "user", "user"]
    assert "(ledger call c1): ok\nhello" in openai["messages"][1]["content"]
    anthropic = anthropic_messages_body(request, model="m", supports_tools=False)
    (only,) = anthropic["messages"]  # consecutive user text merged: roles alternate
    assert only["role"] == "user"
    texts = [b["text"] for b in only["content"]]
    assert any("(ledger call c1): ok" in t for t in texts)
    assert all(b["type"] == "text" for b in only["content"])
    with_tools = openai_chat_body(request, model="m")
    assert [m["role"] for m in with_tools["messages"]] == ["user", "assistant", "tool", "user"]


def test_no_tool_calling_with_an_evidence_contract_ends_at_once(tmp_path: Path) -> None:
    spec = scripted_spec(
        [{"text": "README.md calls it Widget."}, {"text": "never asked"}],
        provider={
            "kind": "scripted",
            "supports_tools": False,
            "script": {"turns": [{"text": "README.md calls it Widget."}]},
        },
        contract={"evidence": "observe"},
    )
    result, requests = run(spec, tmp_path)
    assert len(requests) == 1  # no correction turn
    assert (result.terminal["state"], result.terminal["reason"]) == (
        "unverified",
        "no_tool_calling",
    )
    assert "cannot call tools" in result.terminal["final_text"]


# -- tool profiles ------------------------------------------------------------------------------


def test_a_tool_profile_picks_the_tools_and_is_a_ceiling(tmp_path: Path) -> None:
    reviewer = scripted_spec([{"text": "x"}], tool_profile="reviewer")
    assert reviewer.tools == ("Read", "Glob", "Grep", "LS")
    assert set(registry_for(reviewer, SETTINGS).names()) == {"Read", "Glob", "Grep", "LS"}
    editor = scripted_spec([{"text": "x"}], tool_profile="editor")
    assert "Write" in editor.tools and "Bash" in editor.tools
    registry_for(editor, SETTINGS)
    too_much = scripted_spec([{"text": "x"}], tool_profile="reviewer", tools=["Read", "Write"])
    with pytest.raises(ConfigError, match="tool Write is a write tool; tool_profile reviewer"):
        registry_for(too_much, SETTINGS)
    with pytest.raises(ValidationError, match="tool Task is a write tool"):
        scripted_spec([{"text": "x"}], tool_profile="reviewer", tools=["Read", "Task"])
    job = tmp_path / "review.yaml"
    job.write_text(
        "prompt: review\ntool_profile: reviewer\ntools: [Read, Task]\n"
        "provider: {kind: scripted, script: [{text: x}]}\n"
    )
    with pytest.raises(ConfigError, match="tool Task is a write tool"):
        load_job(job)


def test_an_agent_definition_may_name_a_tool_profile() -> None:
    spec = scripted_spec(
        [{"text": "x"}],
        tools=["Read", "Write", "Task"],
        agents={"reviewer": {"description": "reviews", "tool_profile": "reviewer"}},
    )
    child = spec.child_spec("reviewer", "review the diff")
    assert child.tool_profile is not None and child.tools == ("Read", "Glob", "Grep", "LS")
    assert spec.verifier_spec("judge").tool_profile == "reviewer"
    writer = spec.model_copy(
        update={
            "agents": {
                **spec.agents,
                "bad": spec.agents["reviewer"].model_copy(update={"tools": ("Read", "Edit")}),
            }
        }
    )
    with pytest.raises(ConfigError, match="tool Edit is a write tool"):
        registry_for(writer.child_spec("bad", "x"), SETTINGS)
