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
read the README a previous Glob found.  An unresolvable reference becomes the
empty string (the tool then reports its own error to the model).

Other keys per turn: ``stop_reason`` (end_turn, max_tokens, ...), ``usage``
(``input_tokens``/``output_tokens``), ``delay_s`` (seconds to wait before
answering), ``raw_arguments`` on a call (sent instead of ``arguments``, for
invalid-JSON tests).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import (
    ProviderRequest,
    ProviderTurn,
    StopReason,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from nahida_workers.errors import ConfigError, ProviderError
from nahida_workers.providers.early_calls import emit_parsed

__all__ = ["Script", "ScriptError", "ScriptTurn", "ScriptedCall", "ScriptedProvider", "load_script"]

_REF = re.compile(r"^\$\{result:(?P<call>[^:}]+)(?::line:(?P<line>\d+))?\}$")


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


class ScriptTurn(_Model):
    """One assistant turn of a script."""

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    delay_s: float = 0.0
    error: ScriptError | None = None


class Script(_Model):
    """A whole script: turns served in order."""

    turns: tuple[ScriptTurn, ...]


def load_script(source: str | Path | Mapping[str, Any]) -> Script:
    """Load a script from a file path, a YAML/JSON text, or a mapping.

    Raises:
        ConfigError: the file is missing or the script is malformed.
    """
    try:
        if isinstance(source, Mapping):
            data: Any = dict(source)
        else:
            path = Path(source)
            text = path.read_text("utf-8") if path.suffix in {".yaml", ".yml", ".json"} else source
            data = yaml.safe_load(str(text))
        if isinstance(data, list):
            data = {"turns": data}
        return Script.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"invalid provider script: {exc}") from None


def _results_by_call(request: ProviderRequest) -> dict[str, str]:
    return {m.call_id: m.content for m in request.messages if isinstance(m, ToolResultMessage)}


def _resolve(value: Any, results: Mapping[str, str]) -> Any:
    if isinstance(value, str):
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
    return ProviderTurn(
        text=turn.text,
        tool_calls=tuple(calls),
        stop_reason=stop,
        raw_stop_reason=stop.value,
        usage=turn.usage,
        model="scripted",
    )


class ScriptedProvider:
    """Serves script turn ``request.turn_index`` for each call.

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
        if request.turn_index >= len(self.script.turns):
            raise ProviderError(
                f"script exhausted: no turn {request.turn_index} "
                f"(script has {len(self.script.turns)})",
                retryable=False,
                failure_code=FailureCode.SCRIPT_EXHAUSTED,
            )
        turn = self.script.turns[request.turn_index]
        if turn.delay_s > 0:
            self._sleep(turn.delay_s)
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
