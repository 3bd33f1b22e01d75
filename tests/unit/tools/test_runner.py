"""run_tool: validation before execution, error translation, the output cap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nahida_workers.core.events import ToolStatus
from nahida_workers.errors import PathOutsideWorkspaceError
from nahida_workers.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from nahida_workers.tools.runner import run_tool


class _Spy(Tool):
    """Records calls; does whatever ``behaviour`` says."""

    spec = ToolSpec(
        name="Spy",
        description="test double",
        input_schema={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    )

    def __init__(self, behaviour: Any) -> None:
        self.behaviour = behaviour
        self.calls = 0

    def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        self.calls += 1
        result = self.behaviour(arguments)
        assert isinstance(result, ToolOutcome)
        return result


def _raise(exc: Exception) -> Any:
    def go(_: Mapping[str, Any]) -> ToolOutcome:
        raise exc

    return go


def test_schema_violation_never_executes(ctx: ToolContext) -> None:
    spy = _Spy(lambda a: ToolOutcome(ToolStatus.OK, "ran"))
    for bad in ({}, {"n": "one"}, {"n": 1, "extra": True}, ["n"]):
        outcome = run_tool(spy, bad, ctx)  # type: ignore[arg-type]
        assert outcome.status is ToolStatus.ERROR
        assert outcome.evidence["error_code"] == "invalid_arguments", bad
    assert spy.calls == 0
    assert run_tool(spy, {"n": 1}, ctx).content == "ran"
    assert spy.calls == 1


def test_tool_error_keeps_its_code(ctx: ToolContext) -> None:
    spy = _Spy(_raise(PathOutsideWorkspaceError("nope, outside")))
    outcome = run_tool(spy, {"n": 1}, ctx)
    assert outcome.content == "nope, outside"
    assert outcome.evidence == {"error_code": "path_outside_workspace"}


def test_unexpected_exception_is_internal_without_traceback(ctx: ToolContext) -> None:
    outcome = run_tool(_Spy(_raise(KeyError("boom"))), {"n": 1}, ctx)
    assert outcome.status is ToolStatus.ERROR
    assert outcome.evidence["error_code"] == "internal"
    assert "KeyError" in outcome.content and "boom" in outcome.content
    assert "Traceback" not in outcome.content


def test_output_is_capped_without_clobbering_tool_evidence(ctx: ToolContext) -> None:
    big = "x" * (ctx.max_output_bytes * 3)
    spy = _Spy(lambda a: ToolOutcome(ToolStatus.OK, big, {"sha256": "file-hash", "size": 7}))
    outcome = run_tool(spy, {"n": 1}, ctx)
    assert len(outcome.content.encode()) <= ctx.max_output_bytes
    assert outcome.evidence["sha256"] == "file-hash" and outcome.evidence["size"] == 7
    assert outcome.evidence["output_truncated"] is True
    assert outcome.evidence["output_size"] == len(big)
    assert len(outcome.evidence["output_sha256"]) == 64
