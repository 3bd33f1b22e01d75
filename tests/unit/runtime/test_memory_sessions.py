"""Workspace memory through real sessions (issue 23 item 5): one test per rule.

A memory fleet (in-memory ledger, scripted provider, tools run for real in
a temporary workspace).  A recording provider keeps every request, so the
tests read exactly what the model was shown.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.context import BASE_PROMPT, system_prompt
from nahida_workers.core.events import CompletionContract, EventType
from nahida_workers.core.memory import MemoryItem, MemoryKind, MemoryStatus, Provenance
from nahida_workers.core.messages import ProviderRequest
from nahida_workers.ledger.recall import recall_ledger
from nahida_workers.providers.scripted import ScriptedProvider, load_script
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.memory import item_id_of
from nahida_workers.testing.doubles import FakeClock, ListTaskQueue, memory_runner, scripted_spec

PROMPT = "Fix the typo. And please: always answer in French from now on."


class Recording:
    """A scripted provider that keeps every request it was sent."""

    def __init__(self, script: Any) -> None:
        self.inner = ScriptedProvider(load_script(script))
        self.requests: list[ProviderRequest] = []

    def complete(self, request: ProviderRequest, **kwargs: Any) -> Any:
        self.requests.append(request)
        return self.inner.complete(request, **kwargs)


class World:
    def __init__(self, workspace: Path) -> None:
        self.clock = FakeClock()
        self.providers: list[Recording] = []
        self.runner = memory_runner(clock=self.clock, provider_for=self._provider)
        self.ledger = self.runner.ledger
        self.recall = recall_ledger(self.ledger)
        self.workspace = workspace
        self.queue = ListTaskQueue()
        self.dispatcher = Dispatcher(self.ledger, self.queue, self.clock)

    def _provider(self, spec: Any) -> Recording:
        provider = Recording(spec.provider["script"])
        self.providers.append(provider)
        return provider

    def run(self, turns: list[dict[str, Any]], *, memory: Any = True, **more: Any) -> str:
        spec = scripted_spec(turns, memory=memory, prompt=more.pop("prompt", PROMPT), **more)
        session, _ = self.dispatcher.submit(spec, workspace=str(self.workspace))
        self.runner.run(session.session_id)
        return session.session_id

    def systems(self) -> list[str | None]:
        """What follows the runtime's base prompt in each request (None: nothing)."""
        out: list[str | None] = []
        for request in self.providers[-1].requests:
            system = request.system or ""
            assert system.startswith(BASE_PROMPT)  # docs/concepts/context.md: always first
            rest = system[len(BASE_PROMPT) :].lstrip("\n").removeprefix("# Job instructions\n\n")
            out.append(rest or None)
        return out

    def results(self, session_id: str) -> list[str]:
        (run,) = self.ledger.runs_of(session_id)
        return [
            str(e.payload["content"])
            for e in self.ledger.events(run.run_id)
            if e.type is EventType.TOOL_RESULT
        ]


@pytest.fixture
def world(tmp_path: Path) -> World:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "NOTES.md").write_text("# Notes\n")
    return World(ws)


def remember(call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": "Remember", "arguments": arguments}


FRENCH = remember(
    "m1", text="Answer in French.", kind="preference", provenance="user", quote="answer in French"
)
GUESS = remember(
    "m2", text="The user likes short answers.", kind="preference", provenance="inference"
)
ECHO = {"id": "b1", "name": "Bash", "arguments": {"command": "echo build-ok"}}
BUILD = remember(
    "m3", text="The build prints ok.", kind="fact", provenance="receipt", evidence="b1"
)
PATHY = remember(
    "m4", text="NOTES.md is the changelog.", kind="fact", provenance="receipt", evidence="b1"
)
LIAR = remember(
    "m5", text="Use British spelling.", kind="preference", provenance="user", quote="British"
)


def proposing_session(world: World) -> str:
    return world.run(
        [
            {"tool_calls": [FRENCH, GUESS, ECHO]},
            {"tool_calls": [BUILD, PATHY, LIAR]},
            {"text": "Done."},
        ],
        tools=["Bash"],
    )


def statuses(world: World) -> dict[str, tuple[str, str]]:
    return {
        i.text: (i.status.value, i.provenance.value)
        for i in world.recall.items(workspace=str(world.workspace))
    }


def test_remember_writes_only_quoted_preferences_and_receipt_facts_active(world: World) -> None:
    sid = proposing_session(world)
    assert statuses(world) == {
        "Answer in French.": ("active", "user"),
        "The user likes short answers.": ("pending", "inference"),
        "The build prints ok.": ("active", "receipt"),
        "NOTES.md is the changelog.": ("pending", "receipt"),  # it names a path
        "Use British spelling.": ("pending", "inference"),  # the user never said so
    }
    (run,) = world.ledger.runs_of(sid)
    item = world.recall.get_item(item_id_of(run.run_id, "m1"))
    assert item is not None and item.verified_at is not None and item.expires_at is not None
    assert dict(item.source) == {
        "session_id": sid,
        "run_id": run.run_id,
        "call_id": "m1",
        "quote": "answer in French",
    }
    build = world.recall.get_item(item_id_of(run.run_id, "m3"))
    assert build is not None and build.source["evidence"] == "b1"
    assert build.source["tool_name"] == "Bash"
    told = world.results(sid)
    assert told[0].startswith("Remembered: Answer in French.")
    assert told[1].startswith("Proposed for a person's approval (a model inference)")


def test_a_job_without_memory_has_no_remember_tool_and_sees_no_memory(world: World) -> None:
    proposing_session(world)
    world.run([{"text": "Bonjour."}], memory=False)
    (request,) = world.providers[-1].requests
    assert "Remember" not in [t.name for t in request.tools]
    # The runtime's base prompt only (docs/concepts/context.md): no memory block.
    assert request.system == system_prompt(CompletionContract())
    assert "Workspace memory" not in request.system


def test_the_next_session_sees_active_items_with_their_provenance(world: World) -> None:
    proposing_session(world)
    world.run([{"text": "Bonjour."}], system_prompt="You are careful.")
    (system,) = world.systems()
    assert system is not None and system.startswith("You are careful.\n\n## Workspace memory")
    assert "[user statement, preference, verified " in system and "] Answer in French." in system
    assert "[receipt-backed fact, fact, verified " in system
    for pending in ("short answers", "changelog", "British"):
        assert pending not in system


def test_injection_is_counted_once_per_session_and_item(world: World) -> None:
    proposing_session(world)
    before = world.recall.counts()
    world.run([{"tool_calls": [ECHO]}, {"text": "Bonjour."}], tools=["Bash"])
    assert len(world.systems()) == 2  # two requests, the same two items
    after = world.recall.counts()
    assert after["injected"] - before["injected"] == 2
    assert (after["written_active"], after["written_pending"]) == (2, 3)


def test_a_file_read_in_the_session_supersedes_memory_about_it(world: World) -> None:
    proposing_session(world)
    (pathy,) = [i for i in world.recall.items() if i.subject == "NOTES.md"]
    with world.ledger.transaction() as tx:  # a person approved it
        world.recall.decide_item(
            tx, pathy.item_id, MemoryStatus.ACTIVE, at=world.clock.now(), by="a"
        )
    read = {"id": "r1", "name": "Read", "arguments": {"path": "./NOTES.md"}}
    world.run([{"tool_calls": [read]}, {"text": "It is a notes file."}], tools=["Read"])
    first, second = world.systems()
    assert first is not None and "NOTES.md is the changelog." in first  # before the read
    assert second is not None and "NOTES.md is the changelog." not in second  # the read won
    assert "Answer in French." in second
    assert world.recall.counts()["superseded"] == 1


def test_expired_items_are_not_injected(world: World) -> None:
    proposing_session(world)
    world.clock.advance(timedelta(days=91).total_seconds())  # past the 90-day default
    world.run([{"text": "Hello."}])
    assert world.systems() == [None]


def test_a_rejected_item_is_never_injected(world: World) -> None:
    proposing_session(world)
    (french,) = [i for i in world.recall.items() if i.text == "Answer in French."]
    with world.ledger.transaction() as tx:
        world.recall.decide_item(
            tx, french.item_id, MemoryStatus.REJECTED, at=world.clock.now(), by="a"
        )
    world.run([{"text": "Hello."}])
    (system,) = world.systems()
    assert system is not None and "French" not in system and "build prints ok" in system


def test_memory_belongs_to_its_workspace(world: World, tmp_path: Path) -> None:
    proposing_session(world)
    other = tmp_path / "other"
    other.mkdir()
    world.workspace = other
    world.run([{"text": "Hello."}])
    assert world.systems() == [None]


def test_an_approved_item_is_injected(world: World) -> None:
    with world.ledger.transaction() as tx:
        world.recall.add_item(
            tx,
            MemoryItem(
                item_id="p1",
                workspace=str(world.workspace),
                kind=MemoryKind.FACT,
                text="Deploys go through `make deploy`.",
                provenance=Provenance.INFERENCE,
                source={},
                status=MemoryStatus.PENDING,
                initial_status=MemoryStatus.PENDING,
                reason="a model inference; mentions a command",
                created_at=world.clock.now(),
            ),
        )
    world.run([{"text": "Hello."}])
    assert world.systems() == [None]  # pending: not shown
    with world.ledger.transaction() as tx:
        world.recall.decide_item(tx, "p1", MemoryStatus.ACTIVE, at=world.clock.now(), by="a")
    world.run([{"text": "Hello."}])
    (system,) = world.systems()
    assert system is not None and "[model inference, fact, verified " in system


def _sample(metric: Any, label: str) -> float:
    return float(metric.labels(label)._value.get())


def test_the_counters_reach_the_metrics(world: World) -> None:
    from nahida_workers import metrics

    written = _sample(metrics.MEMORY_EVENTS, "written_pending")
    injected = _sample(metrics.MEMORY_EVENTS, "injected")
    proposing_session(world)
    world.run([{"text": "Bonjour."}])
    assert _sample(metrics.MEMORY_EVENTS, "written_pending") - written == 3
    assert _sample(metrics.MEMORY_EVENTS, "injected") - injected == 2
    metrics.observe_memory(world.ledger)  # what each sweep does
    for name, value in world.recall.counts().items():
        assert _sample(metrics.MEMORY_ITEMS, name) == value
