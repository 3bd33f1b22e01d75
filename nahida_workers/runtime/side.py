"""Side conversations: ask a session a question without touching it.

``nahida ask SESSION "question"`` and ``POST /v1/sessions/{id}/ask``.  The
answer comes from a **copy** of the session's transcript -- every committed
event of every run, projected as the loop projects it
(:func:`~nahida_workers.core.transcript.project`, compacted to the session's
context budget) -- sent with the system prompt and tool schemas of its loop config to
a **new provider instance** built from the session's provider config (a
scripted provider serves its script's ``ask`` turns).  The rules of the
exchange are :mod:`nahida_workers.core.side`: every tool call is refused.

Nothing is written to the session: no event, receipt, inbox message, lease
or status change, so its transcript and its task are exactly as before.
The exchange is recorded apart, as a content-addressed artifact
(``prompt_artifacts``; kind ``side_conversation``), whose sha256 the caller
gets back: who asked what and what was answered stays in the ledger, and
the session's own history does not see it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol, assert_never

from nahida_workers.core.events import Event
from nahida_workers.core.loop import LoopConfig
from nahida_workers.core.messages import Message
from nahida_workers.core.records import RunRecord, SessionRecord
from nahida_workers.core.side import (
    Answered,
    AskAgain,
    RefusedCall,
    SideSetup,
    copy_transcript,
    next_step,
    side_request,
)
from nahida_workers.core.transcript import project
from nahida_workers.errors import ConfigError, NotFoundError, UserError
from nahida_workers.ports import Provider
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.scripted import load_script
from nahida_workers.runtime.spec import SessionSpec

__all__ = [
    "MAX_QUESTION_CHARS",
    "SideAnswer",
    "SideLedger",
    "ask_session",
    "side_provider_config",
]

#: Longest question accepted (characters).
MAX_QUESTION_CHARS = 16 * 1024
#: A side question is answered while its asker waits (an HTTP request, a
#: terminal): each provider gets at most this many retries ...
SIDE_MAX_RETRIES = 1
#: ... and this many seconds per connect and chunk (less when the session's is less).
SIDE_TIMEOUT_S = 30.0


class SideLedger(Protocol):
    """What a side conversation reads (and the artifact store it records into)."""

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session row, or None."""
        ...

    def runs_of(self, session_id: str) -> list[RunRecord]:
        """The session's runs, oldest first."""
        ...

    def events(self, run_id: str) -> list[Event]:
        """A run's committed events, in order."""
        ...

    def put_artifact(self, data: bytes, *, at: datetime) -> str:
        """Store ``data`` once; its sha256 hex."""
        ...


@dataclass(frozen=True)
class SideAnswer:
    """The answer of a side conversation and where it is recorded.

    Attributes:
        session_id: the session asked about.
        question / answer: the exchange.
        stop: ``answered`` or ``turn_limit`` (tool calls refused to the end).
        turns: provider turns taken.
        refused: every tool call refused (turn, call id, tool name).
        transcript_messages: messages copied from the session's transcript.
        provider / model: the provider instance that answered.
        record: sha256 of the recorded exchange (an artifact).
    """

    session_id: str
    question: str
    answer: str
    stop: str
    turns: int
    refused: tuple[RefusedCall, ...]
    transcript_messages: int
    provider: str
    model: str
    record: str


def side_provider_config(config: ProviderConfig) -> ProviderConfig:
    """The provider config a side conversation uses: the session's, with scripts' ``ask`` turns.

    Retries and the read timeout are capped (:data:`SIDE_MAX_RETRIES`,
    :data:`SIDE_TIMEOUT_S`): someone is waiting for the answer.

    Raises:
        UserError: a scripted provider whose script has no ``ask`` turns.
        ConfigError: a script cannot be read.
    """
    fallbacks = [side_provider_config(f) for f in config.fallbacks]
    bounded = {
        "fallbacks": fallbacks,
        "max_retries": min(config.max_retries, SIDE_MAX_RETRIES),
        "timeout_s": min(config.timeout_s, SIDE_TIMEOUT_S),
    }
    if config.kind != "scripted":
        return config.model_copy(update=bounded)
    source: Any = config.script
    script = load_script({"turns": source} if isinstance(source, list) else source)
    if not script.ask:
        raise UserError(
            "the session's scripted provider has no `ask` turns to answer side questions with"
        )
    turns = [t.model_dump(mode="json", exclude_defaults=True) for t in script.ask]
    return config.model_copy(update={**bounded, "script": {"turns": turns}})


def _transcript(ledger: SideLedger, session_id: str) -> list[Message]:
    """The session's transcript as the loop projects it: every run's events, in run order."""
    events = [e for run in ledger.runs_of(session_id) for e in ledger.events(run.run_id)]
    return project(events)


def ask_session(
    ledger: SideLedger,
    session_id: str,
    question: str,
    *,
    provider_for: Callable[[SessionSpec], Provider],
    config_for: Callable[[SessionSpec], LoopConfig],
    now: Callable[[], datetime],
) -> SideAnswer:
    """Answer ``question`` from a copy of the session's transcript; record the exchange apart.

    Args:
        ledger: read-only use of the session's rows, plus the artifact store.
        session_id: the full session id.
        question: the question (1 to :data:`MAX_QUESTION_CHARS` characters, not blank).
        provider_for: builds a new provider instance from a spec (the
            runtime's ``provider_for``); it gets the spec with
            :func:`side_provider_config` applied.
        config_for: the loop config the session's runs use
            (``runtime.ownership.driver.loop_config`` over its registry): the
            system prompt, tool schemas (offered, never run), reply cap and
            context budget come from it, as for the session's own turns.
        now: the clock (the record's time).

    Raises:
        UserError: a blank or over-long question; a scripted session without
            ``ask`` turns.
        NotFoundError: no such session.
        ConfigError: the session's provider config is invalid.
        ProviderError: the provider failed (after its own retries).
    """
    if not question.strip():
        raise UserError("a side question needs text")
    if len(question) > MAX_QUESTION_CHARS:
        raise UserError(f"a side question is at most {MAX_QUESTION_CHARS} characters")
    session = ledger.get_session(session_id)
    if session is None:
        raise NotFoundError(f"no session {session_id}")
    spec = SessionSpec.model_validate(session.config)
    try:
        config = ProviderConfig.model_validate(spec.provider)
    except ValueError as exc:
        raise ConfigError(f"invalid provider config: {exc}") from None
    side_spec = spec.model_copy(
        update={"provider": side_provider_config(config).model_dump(mode="json")}
    )
    provider = provider_for(side_spec)
    transcript = _transcript(ledger, session_id)
    loop = config_for(spec)
    setup = SideSetup(
        system=loop.system_prompt,
        tools=loop.tools,
        max_output_tokens=loop.max_output_tokens,
        run_id=f"side-{uuid.uuid4().hex}",
    )
    messages = copy_transcript(transcript, question, budget_tokens=loop.context_budget_tokens)
    refused: tuple[RefusedCall, ...] = ()
    turn = 0
    while True:
        reply = provider.complete(side_request(setup, messages, turn))
        step = next_step(messages, reply, turn, refused)
        match step:
            case Answered():
                break
            case AskAgain():
                messages, refused, turn = step.messages, step.refused, turn + 1
            case _:
                assert_never(step)
    record = {
        "kind": "side_conversation",
        "session_id": session_id,
        "asked_at": now().isoformat(),
        "question": question,
        "answer": step.text,
        "stop": step.stop,
        "turns": step.turns,
        "refused": [asdict(r) for r in step.refused],
        "transcript_messages": len(transcript),
        "provider": provider.name,
        "model": provider.model,
    }
    data = json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
    sha = ledger.put_artifact(data, at=now())
    return SideAnswer(
        session_id=session_id,
        question=question,
        answer=step.text,
        stop=step.stop,
        turns=step.turns,
        refused=step.refused,
        transcript_messages=len(transcript),
        provider=provider.name,
        model=provider.model,
        record=sha,
    )
