"""Tool declarations, the outcome of one execution, and the registry.

A tool declares (DESIGN.md section 5): name, JSON Schema for its input,
``read_only``, ``concurrency_safe``, ``idempotent``, evidence kind, timeout in
seconds and a placement.  Only tools that are read-only AND concurrency-safe
may leave the session worker (DESIGN.md section 5); :meth:`ToolSpec.may_fan_out`
is that rule, in one place.
"""

from __future__ import annotations

import abc
import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import jsonschema

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.core.messages import ToolSchema
from nahida_workers.errors import ConfigError, InvalidToolArgumentsError

__all__ = [
    "Placement",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
]


class Placement(StrEnum):
    """Where a concurrency-safe tool runs (DESIGN.md section 5).

    ``remote``: a Celery task on the ``tools`` queue (default for
    concurrency-safe tools).  ``local``: a bounded thread pool inside the
    session worker, same commit/ordering/timeout/epoch semantics.  Exclusive
    tools always run inline in the session worker whatever this says.
    """

    REMOTE = "remote"
    LOCAL = "local"


@dataclass(frozen=True)
class ToolSpec:
    """What a tool declares about itself.

    Attributes:
        name: the name the model calls it by.
        description: shown to the model.
        input_schema: JSON Schema (draft 2020-12) of the arguments object.
        read_only: never changes the workspace or the outside world.
        concurrency_safe: may run at the same time as other safe calls.
        idempotent: running it twice with the same idempotency key has the
            effect of running it once (DESIGN.md section 3, recovery may re-run it).
        evidence_kind: what a successful call proves.
        timeout_s: wall-clock limit per call, in seconds.
        placement: where a fan-out-capable call runs by default.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool = False
    concurrency_safe: bool = False
    idempotent: bool = False
    evidence_kind: EvidenceKind = EvidenceKind.NONE
    timeout_s: float = 60.0
    placement: Placement = Placement.REMOTE

    @property
    def may_fan_out(self) -> bool:
        """True iff calls may run in parallel and off the session worker."""
        return self.read_only and self.concurrency_safe

    def schema(self) -> ToolSchema:
        """The model-facing schema of this tool."""
        return ToolSchema(
            name=self.name, description=self.description, input_schema=dict(self.input_schema)
        )


@dataclass(frozen=True)
class ToolContext:
    """What one execution may use.

    Attributes:
        workspace: absolute, resolved workspace root; every path must stay inside.
        run_id / call_id: identity of the call.
        idempotency_key: ``{run_id}:{call_id}``; tools with side effects pass it on.
        max_output_bytes: cap on text returned to the model (head + tail kept).
        cancel: set when the run is cancelled or the executor epoch moved on;
            long-running tools poll it.
        env: extra environment for subprocesses (never secrets).
    """

    workspace: Path
    run_id: str
    call_id: str
    idempotency_key: str
    max_output_bytes: int = 64 * 1024
    cancel: threading.Event = field(default_factory=threading.Event)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one execution, before it is committed.

    Attributes:
        status: ``ok`` or a failure status.
        content: text the model sees (already capped by the tool).
        evidence: facts for the receipt (sha256, size, exit_code, external_id ...).
    """

    status: ToolStatus
    content: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        """Whether the model should see this result as an error."""
        return self.status is not ToolStatus.OK

    @classmethod
    def error(cls, message: str, *, code: str, **evidence: Any) -> ToolOutcome:
        """A failed outcome whose evidence carries the error ``code``."""
        return cls(ToolStatus.ERROR, message, {"error_code": code, **evidence})


class Tool(abc.ABC):
    """Base class: subclasses set ``spec`` and implement :meth:`execute`."""

    spec: ToolSpec

    @functools.cached_property
    def _validator(self) -> Any:
        """The input schema compiled once per tool (checking it per call costs ~1 ms)."""
        schema = dict(self.spec.input_schema)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema)

    def validate(self, arguments: Mapping[str, Any]) -> None:
        """Check ``arguments`` against the input schema.

        Raises:
            InvalidToolArgumentsError: with a message the model can act on.
        """
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(dict(arguments)))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise InvalidToolArgumentsError(
                f"invalid arguments for {self.spec.name} at {where}: {error.message}"
            )

    @abc.abstractmethod
    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run once with validated ``arguments``.

        Raises:
            ToolError: a failure the model should see (the caller turns it
                into an ``error`` outcome); anything else is a bug and is
                reported as an ``error`` outcome with code ``internal``.
        """


class ToolRegistry:
    """Tools by name, with per-tool placement overrides (job spec, settings)."""

    def __init__(
        self, tools: Iterable[Tool], *, placement: Mapping[str, Placement] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.spec.name in self._tools:
                raise ConfigError(f"tool {tool.spec.name!r} registered twice")
            self._tools[tool.spec.name] = tool
        self._placement = dict(placement or {})
        unknown = set(self._placement) - set(self._tools)
        if unknown:
            raise ConfigError(f"placement given for unknown tools: {sorted(unknown)}")

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def schemas(self) -> tuple[ToolSchema, ...]:
        """Model-facing schemas in registration order."""
        return tuple(t.spec.schema() for t in self._tools.values())

    def placement_of(self, name: str) -> Placement | None:
        """Where calls of ``name`` run: None for inline (exclusive or unknown)."""
        tool = self._tools.get(name)
        if tool is None or not tool.spec.may_fan_out:
            return None
        return self._placement.get(name, tool.spec.placement)

    def with_tool(self, tool: Tool) -> ToolRegistry:
        """A registry with ``tool`` added (placement overrides kept)."""
        return ToolRegistry([*self._tools.values(), tool], placement=self._placement)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry with only ``names`` (job specs choose their tools)."""
        wanted = list(names)
        missing = [n for n in wanted if n not in self._tools]
        if missing:
            raise ConfigError(f"unknown tools: {missing}")
        return ToolRegistry(
            (self._tools[n] for n in wanted),
            placement={k: v for k, v in self._placement.items() if k in wanted},
        )
