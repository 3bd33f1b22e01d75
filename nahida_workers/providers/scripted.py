"""The scripted provider: a fixed list of assistant turns, for tests, demos, benchmarks.

Script format (YAML or JSON)::

    turns:
      - text: "Surveying."                 # assistant text (optional)
        tool_calls:                        # optional, in provider order
          - id: c1
            name: Glob
            arguments: {pattern: "**/*"}
      - error: {status: 429, message: "slow down", retry_after: 1.5}
      - text: "Done."

Turn N of the script is served for provider call N of the run
(``ProviderRequest.turn_index``), so a run resumed after a crash continues at
the right turn.  Running out of script is a :class:`ProviderError` with code
``script_exhausted``, never a silent completion.

A string argument of the exact form ``${result:CALL_ID:line:N}`` is replaced by
line N (0-based) of the tool result of ``CALL_ID`` found in the request's
transcript; ``${result:CALL_ID}`` by the whole result.  That lets a fixed plan
read the README a previous Glob found.  When a call id came back more than
once (the loop renames a repeat ``CALL_ID#2``, ``#3`` ...), the reference is
to the latest.  ``${call:CALL_ID}`` is replaced by the id that latest call
was committed under (to name it, e.g. as a task's evidence).  An
unresolvable reference becomes the empty string (the tool then reports its
own error to the model).

``repeat_from: N`` makes a run's turns a loop: after its last turn it is
served turn N, N+1 ... again (a scripted team member claims, works and
completes one task per cycle; DESIGN.md section 8).

Other keys per turn: ``stop_reason`` (end_turn, max_tokens, refusal,
pause_turn, ...), ``refusal`` (refusal text, as OpenAI sends it),
``content_blocks`` (the raw blocks of a paused turn), ``usage``
(``input_tokens``/``output_tokens``), ``delay_s`` (seconds to wait before
answering), ``raw_arguments`` on a call (sent instead of ``arguments``, for
invalid-JSON tests), ``expect`` (what the request must hold: strings of the
system text or the last user message, a named tool choice -- see
:class:`ScriptExpect`).  A turn is classified the way the stream parsers do it
(``providers/classify.py``): ``stop_reason: tool_calls`` with no call is a
finish reason that claims calls nobody sent (an anomaly, case B09).

A session runs its script from turn 0 in every run.  ``next_runs`` (a list
of turn lists) gives the session's second, third ... run their own turns
instead (``ProviderRequest.run_index``); a run past the last list uses the
last one.

``ask`` (a list of turns) is what a side conversation about the session
(``nahida ask``, ``runtime/side.py``) is served, turn N for its provider
call N; a script without it cannot answer side questions.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import (
    ProviderRequest,
    ProviderTurn,
    StopReason,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from nahida_workers.errors import ConfigError, ProviderError
from nahida_workers.providers.classify import build_turn
from nahida_workers.providers.early_calls import emit_parsed
from nahida_workers.yaml_input import load_yaml, read_yaml_file

__all__ = [
    "Script",
    "ScriptError",
    "ScriptExpect",
    "ScriptTurn",
    "ScriptedCall",
    "ScriptedProvider",
    "load_script",
    "reads_a_file",
    "unknown_script_tools",
]

_REF = re.compile(r"^\$\{result:(?P<call>[^:}]+)(?::line:(?P<line>\d+))?\}$")
_CALL_REF = re.compile(r"^\$\{call:(?P<call>[^:}]+)\}$")
#: Where ``_results_by_call`` keeps the latest committed id of each script call id.
_ID_KEY = "\0id:"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedCall(_Model):
    """One tool call in a script turn."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class ScriptError(_Model):
    """A scripted provider failure (HTTP-like status)."""

    status: int = 500
    message: str = "scripted provider error"
    retry_after: float | None = None


class ScriptExpect(_Model):
    """What a script turn expects of the request it answers (evaluation rows of prompts).

    A request that does not meet it is a :class:`ProviderError` (the run
    ends ``failed/provider_error``), so a row that expects anything else
    reports the mismatch.

    Attributes:
        system_contains: strings the system text must contain.
        system_lacks: strings it must not contain.
        last_user_contains: strings the request's last user message must contain.
        tool_name: the named ``tool_choice`` the request must carry (``""``:
            none at all).
    """

    system_contains: tuple[str, ...] = ()
    system_lacks: tuple[str, ...] = ()
    last_user_contains: tuple[str, ...] = ()
    tool_name: str | None = None

    def unmet(self, request: ProviderRequest) -> list[str]:
        """What the request lacks, one short phrase each (empty: met)."""
        system = request.system or ""
        last_user = next(
            (m.text for m in reversed(request.messages) if isinstance(m, UserMessage)), ""
        )
        out = [f"system lacks {s!r}" for s in self.system_contains if s not in system]
        out += [f"system holds {s!r}" for s in self.system_lacks if s in system]
        out += [
            f"last user message lacks {s!r}" for s in self.last_user_contains if s not in last_user
        ]
        if self.tool_name is not None and (request.tool_name or "") != self.tool_name:
            out.append(f"tool_name is {request.tool_name!r}, not {self.tool_name!r}")
        return out


class ScriptTurn(_Model):
    """One assistant turn of a script."""

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    stop_reason: StopReason | None = None
    refusal: str | None = None
    content_blocks: tuple[dict[str, Any], ...] = ()
    usage: Usage | None = None
    delay_s: float = 0.0
    error: ScriptError | None = None
    expect: ScriptExpect | None = None


class Script(_Model):
    """A whole script: turns served in order (``next_runs``: the turns of later runs).

    ``ask``: the turns side conversations are served (``runtime/side.py``).

    ``repeat_from``: after the last turn of a run, serve its turns from this
    index again, in a loop (None: the script is exhausted there).
    """

    turns: tuple[ScriptTurn, ...]
    next_runs: tuple[tuple[ScriptTurn, ...], ...] = ()
    repeat_from: int | None = Field(None, ge=0)
    ask: tuple[ScriptTurn, ...] = ()

    def turn_at(self, run_index: int, turn_index: int) -> ScriptTurn | None:
        """The turn served for provider call ``turn_index`` of run ``run_index``, or None."""
        turns = self.turns_of_run(run_index)
        if turn_index < len(turns):
            return turns[turn_index]
        start = self.repeat_from
        if start is None or start >= len(turns):
            return None
        return turns[start + (turn_index - len(turns)) % (len(turns) - start)]

    def turns_of_run(self, run_index: int) -> tuple[ScriptTurn, ...]:
        """The turns served to run ``run_index`` (0-based) of a session."""
        if run_index <= 0 or not self.next_runs:
            return self.turns
        return self.next_runs[min(run_index, len(self.next_runs)) - 1]

    def tool_names(self) -> list[str]:
        """Every tool name a turn of the script calls, in order of first use."""
        names: list[str] = []
        for turns in (self.turns, *self.next_runs):
            for turn in turns:
                names.extend(c.name for c in turn.tool_calls if c.name not in names)
        return names


#: A ``script`` string with one of these suffixes is read as a file path.
SCRIPT_FILE_SUFFIXES = frozenset({".yaml", ".yml", ".json"})


def reads_a_file(source: object) -> bool:
    """True when :func:`load_script` would read ``source`` from a file (not inline data)."""
    if isinstance(source, Path):
        return True
    return isinstance(source, str) and Path(source).suffix in SCRIPT_FILE_SUFFIXES


def load_script(source: str | Path | Mapping[str, Any]) -> Script:
    """Load a script from a file path, a YAML/JSON text, or a mapping.

    Raises:
        ConfigError: the file is missing or the script is malformed.
    """
    try:
        if isinstance(source, Mapping):
            data: Any = dict(source)
        else:
            if reads_a_file(source):
                data = read_yaml_file(Path(source), what="provider script")
            else:
                # Inline text (a job file's or an API request's): the same
                # alias and size limits as a file, or one request could
                # expand a "billion laughs" document in the server.
                data = load_yaml(str(source), source="provider script")
        if isinstance(data, list):
            data = {"turns": data}
        return Script.model_validate(data)
    except ConfigError as exc:
        raise ConfigError(f"invalid provider script: {exc}") from None
    except (OSError, ValidationError) as exc:
        raise ConfigError(f"invalid provider script: {exc}") from None


def unknown_script_tools(provider: Mapping[str, Any], offered: set[str]) -> list[str]:
    """Tool names a scripted provider (or a scripted fallback) calls that are not ``offered``.

    Args:
        provider: a provider config mapping (``kind``, ``script``, ``fallbacks``).
        offered: the tool names the job gives the model.

    Raises:
        ConfigError: a script is missing or malformed.
    """
    unknown: list[str] = []
    configs = [provider]
    while configs:
        config = configs.pop(0)
        fallbacks = config.get("fallbacks")
        if isinstance(fallbacks, list):
            configs.extend(f for f in fallbacks if isinstance(f, Mapping))
        if config.get("kind", "scripted") != "scripted" or config.get("script") is None:
            continue
        source = config["script"]
        script = load_script({"turns": source} if isinstance(source, list) else source)
        unknown.extend(n for n in script.tool_names() if n not in offered and n not in unknown)
    return unknown


def unknown_script_agents(provider: Mapping[str, Any], agents: set[str]) -> list[str]:
    """The agents the script's ``Task`` calls start that ``agents`` lacks (DESIGN.md section 8).

    Raises:
        ConfigError: a script is missing or malformed.
    """
    unknown: list[str] = []
    if provider.get("kind", "scripted") != "scripted" or provider.get("script") is None:
        return unknown
    source = provider["script"]
    script = load_script({"turns": source} if isinstance(source, list) else source)
    for turns in (script.turns, *script.next_runs):
        for turn in turns:
            for call in turn.tool_calls:
                agent = call.arguments.get("agent") if call.name == "Task" else None
                if isinstance(agent, str) and agent not in agents and agent not in unknown:
                    unknown.append(agent)
    return unknown


def _results_by_call(request: ProviderRequest) -> dict[str, str]:
    """Result content by call id; a renamed repeat (``ID#2``) is also the latest ``ID``."""
    found: dict[str, str] = {}
    for message in request.messages:
        if isinstance(message, ToolResultMessage):
            found[message.call_id] = message.content
            found[_ID_KEY + message.call_id] = message.call_id
            base, mark, n = message.call_id.rpartition("#")
            if mark and base and n.isdigit():
                found[base] = message.content
                found[_ID_KEY + base] = message.call_id
    return found


def _resolve(value: Any, results: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        named = _CALL_REF.match(value)
        if named is not None:
            return results.get(_ID_KEY + named["call"], "")
        match = _REF.match(value)
        if match is None:
            return value
        content = results.get(match["call"], "")
        if match["line"] is None:
            return content
        lines = content.splitlines()
        index = int(match["line"])
        return lines[index] if index < len(lines) else ""
    if isinstance(value, dict):
        return {k: _resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, results) for v in value]
    return value


def scripted_turn(turn: ScriptTurn, request: ProviderRequest) -> ProviderTurn:
    """Build the :class:`ProviderTurn` a script turn stands for.

    Raw arguments are parsed the way a stream parser would: text that is not a
    JSON object gives a call with ``arguments_error`` set.
    """
    results = _results_by_call(request)
    calls: list[ToolCall] = []
    for call in turn.tool_calls:
        if call.raw_arguments is not None:
            try:
                parsed = json.loads(call.raw_arguments) if call.raw_arguments.strip() else {}
            except json.JSONDecodeError as exc:
                calls.append(
                    ToolCall(
                        call_id=call.id,
                        name=call.name,
                        arguments_error=f"arguments are not valid JSON: {exc.msg}",
                        raw_arguments=call.raw_arguments,
                    )
                )
                continue
            if not isinstance(parsed, dict):
                calls.append(
                    ToolCall(
                        call_id=call.id,
                        name=call.name,
                        arguments_error="arguments are not a JSON object",
                        raw_arguments=call.raw_arguments,
                    )
                )
                continue
            calls.append(ToolCall(call_id=call.id, name=call.name, arguments=parsed))
        else:
            calls.append(
                ToolCall(
                    call_id=call.id, name=call.name, arguments=_resolve(call.arguments, results)
                )
            )
    stop = turn.stop_reason or (StopReason.TOOL_CALLS if calls else StopReason.END_TURN)
    raw = stop.value
    if stop is StopReason.TOOL_CALLS:
        stop = StopReason.END_TURN  # normalised from what was parsed, as the parsers do
    return build_turn(
        api="scripted",
        text=turn.text,
        calls=calls,
        raw_stop=raw,
        stop_map={r.value: r for r in StopReason if r is not StopReason.TOOL_CALLS}
        | {StopReason.TOOL_CALLS.value: StopReason.END_TURN},
        tool_stops={StopReason.TOOL_CALLS.value},
        usage=turn.usage,
        model="scripted",
        terminal=True,
        refusal=turn.refusal,
        content_blocks=turn.content_blocks or ({"type": "text", "text": turn.text},),
    )


class ScriptedProvider:
    """Serves script turn ``request.turn_index`` (of run ``request.run_index``) for each call.

    Args:
        script: the turns.
        name / model: recorded on the run row.
        sleep: how ``delay_s`` is waited (tests pass a fake).
    """

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        model: str = "scripted",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.script = script
        self.name = name
        self.model = model
        self._sleep = sleep

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        """Return script turn ``request.turn_index``.

        After ``delay_s``, the text goes to ``on_text`` and then each call
        whose arguments parsed goes to ``on_tool_call``, in order, before the
        turn is returned (a scripted error reports nothing).

        Raises:
            ProviderError: the script has no turn at that index
                (``script_exhausted``), or the turn is a scripted error.
        """
        turn = self.script.turn_at(request.run_index, request.turn_index)
        if turn is None:
            count = len(self.script.turns_of_run(request.run_index))
            raise ProviderError(
                f"script exhausted: no turn {request.turn_index} (script has {count})",
                retryable=False,
                failure_code=FailureCode.SCRIPT_EXHAUSTED,
            )
        if turn.delay_s > 0:
            self._sleep(turn.delay_s)
        unmet = turn.expect.unmet(request) if turn.expect is not None else []
        if unmet:
            raise ProviderError(
                f"script expectation not met at turn {request.turn_index}: " + "; ".join(unmet),
                retryable=False,
                failure_code=FailureCode.PROVIDER_ERROR,
            )
        if turn.error is not None:
            retryable = turn.error.status in {408, 409, 429} or turn.error.status >= 500
            raise ProviderError(
                turn.error.message,
                status=turn.error.status,
                retryable=retryable,
                retry_after=turn.error.retry_after,
                failure_code=(
                    FailureCode.PROVIDER_RATE_LIMITED
                    if turn.error.status == 429
                    else FailureCode.PROVIDER_ERROR
                ),
            )
        result = scripted_turn(turn, request)
        if on_text is not None and result.text:
            on_text(result.text)
        if on_tool_call is not None:
            for call in result.tool_calls:
                emit_parsed(on_tool_call, call)
        return result
