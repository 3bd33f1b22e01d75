"""A ``Task`` call with a ``name`` starts a team member (DESIGN.md section 8)."""

from __future__ import annotations

from typing import Any

import pytest

from nahida_workers.core.children import (
    ChildView,
    TaskMode,
    TaskRequest,
    adopted_result,
    parse_task,
    task_schema,
)
from nahida_workers.core.events import ToolStatus
from nahida_workers.core.messages import ToolCall


def call(**extra: Any) -> ToolCall:
    args = {"description": "d", "prompt": "p", "agent": "worker", **extra}
    return ToolCall(call_id="c", name="Task", arguments=args)


def test_a_named_call_is_a_background_member() -> None:
    got = parse_task(call(name="  bob   the  builder "), ["worker"])
    assert isinstance(got, TaskRequest)
    assert (got.name, got.mode) == ("bob the builder", TaskMode.BACKGROUND)
    explicit = parse_task(call(name="bob", mode="background", isolation="worktree"), ["worker"])
    assert isinstance(explicit, TaskRequest) and explicit.name == "bob"
    assert "name" in task_schema(["worker"]).input_schema["properties"]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"name": "bob", "mode": "foreground"}, "runs in the background"),
        ({"name": "bob", "resume": "k1"}, "'name' and 'resume' do not combine"),
        ({"name": "  "}, "'name' must be a non-empty string"),
        ({"name": "x" * 65}, "'name' must be a non-empty string"),
        ({"name": 7}, "'name' must be a non-empty string"),
    ],
)
def test_a_named_call_is_refused(extra: dict[str, Any], why: str) -> None:
    got = parse_task(call(**extra), ["worker"])
    assert isinstance(got, str) and why in got


def test_a_members_result_gives_its_id_on_the_second_line() -> None:
    view = ChildView("c", session_id="k" * 32, background=True, member_name="bob-2")
    status, text = adopted_result(view)
    assert status is ToolStatus.OK
    assert text.splitlines()[0] == "Started team member bob-2; its member id is on the next line."
    assert text.splitlines()[1] == "k" * 32
