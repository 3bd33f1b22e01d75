"""The script is checked before anything runs (issue 10 item 9)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nahida_workers.cli.batch import _validate
from nahida_workers.errors import ConfigError
from nahida_workers.settings import Settings
from nahida_workers.testing import scripted_spec

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]


def glob(name: str = "Glob") -> dict[str, Any]:
    return {"tool_calls": [{"id": "g", "name": name, "arguments": {"pattern": "*"}}]}


def test_a_scripted_call_of_a_tool_the_job_does_not_offer_is_a_usage_error() -> None:
    spec = scripted_spec([glob("Glb"), {"text": "done"}], tools=("Read", "Glob"))
    with pytest.raises(ConfigError, match=r"\['Glb'\]"):
        _validate(spec, SETTINGS)


def test_a_typo_in_a_later_run_or_a_scripted_fallback_is_found_too() -> None:
    script = {"turns": [{"text": "a"}], "next_runs": [[glob("Bsh")]]}
    later = scripted_spec([{"text": "hi"}], tools=("Glob",)).model_copy(
        update={"provider": {"kind": "scripted", "script": script}}
    )
    with pytest.raises(ConfigError, match="Bsh"):
        _validate(later, SETTINGS)
    fallback = scripted_spec([{"text": "hi"}], tools=("Glob",)).model_copy(
        update={
            "provider": {
                "kind": "scripted",
                "script": {"turns": [{"text": "a"}]},
                "fallbacks": [{"kind": "scripted", "script": {"turns": [glob("LS")]}}],
            }
        }
    )
    with pytest.raises(ConfigError, match="LS"):
        _validate(fallback, SETTINGS)


def test_offered_tools_pass() -> None:
    _validate(scripted_spec([glob(), {"text": "done"}], tools=("Glob",)), SETTINGS)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    structured = {"tool_calls": [{"id": "s", "name": "StructuredOutput", "arguments": {"n": 1}}]}
    _validate(
        scripted_spec([structured], tools=("Glob",), contract={"output_schema": schema}), SETTINGS
    )
    artifact = {"tool_calls": [{"id": "a", "name": "ReadPromptArtifact", "arguments": {}}]}
    _validate(scripted_spec([artifact], tools=("Glob",), prompt="x" * 100_000), SETTINGS)
    with pytest.raises(ConfigError, match="ReadPromptArtifact"):
        _validate(scripted_spec([artifact], tools=("Glob",), prompt="short"), SETTINGS)


def _task(agent: str) -> dict[str, Any]:
    args = {"description": "d", "prompt": "p", "agent": agent}
    return {"tool_calls": [{"id": "t", "name": "Task", "arguments": args}]}


def test_task_jobs_check_agents_and_each_profile(tmp_path: Any) -> None:
    leaf = {"tools": ["Read"], "provider": {"kind": "scripted", "script": {"turns": []}}}
    ok = scripted_spec([_task("leaf"), {"text": "done"}], tools=("Task",), agents={"leaf": leaf})
    _validate(ok, SETTINGS)
    with pytest.raises(ConfigError, match=r"agents the job does not define: \['lefa'\]"):
        _validate(
            ok.model_copy(update={"provider": scripted_spec([_task("lefa")]).provider}), SETTINGS
        )
    # only the built-in agents (general, explore) without an agents: mapping
    with pytest.raises(ConfigError, match=r"does not define: \['leaf'\]; defined: \['explore'"):
        _validate(scripted_spec([_task("leaf")], tools=("Task",)), SETTINGS)
    _validate(scripted_spec([_task("explore"), {"text": "done"}], tools=("Task",)), SETTINGS)
    with pytest.raises(ConfigError, match=r"does not define: \['verifier'\]"):
        _validate(scripted_spec([_task("verifier")], tools=("Task",)), SETTINGS)
    bad_leaf = {"tools": ["Raed"]}
    with pytest.raises(ConfigError, match="Raed"):
        _validate(scripted_spec([{"text": "x"}], tools=("Task",), agents={"l": bad_leaf}), SETTINGS)


def test_the_api_checks_the_script_before_any_session_exists(tmp_path: Any) -> None:
    """``POST /v1/sessions`` refuses what `nahida batch` refuses, before any session exists.

    A typo (no tool of that name on the server) is outside the schema's names:
    422.  A registered tool the job does not offer is the job disagreeing with
    itself: the same usage error as the CLI's (HTTP 400).
    """
    from types import SimpleNamespace

    from fastapi import HTTPException

    from nahida_workers.api.app import registered_tools
    from nahida_workers.api.models import SessionIn
    from nahida_workers.api.sessions import Tools, _create_session

    fleet = SimpleNamespace(settings=SETTINGS, ledger=None, dispatcher=None)
    tools = Tools(registered_tools(SETTINGS))
    for name, error, match in (
        ("Glb", HTTPException, "tool_calls.0.name: unknown tool 'Glb'"),
        ("Grep", ConfigError, r"\['Grep'\]"),
    ):
        job = {
            "prompt": "p",
            "tools": ["Glob"],
            "provider": {"kind": "scripted", "script": [glob(name), {"text": "done"}]},
        }
        body = SessionIn.model_validate({"job": job, "workspace": str(tmp_path)})
        with pytest.raises(error) as refused:
            _create_session(fleet, body, tools)
        assert re.search(match, str(getattr(refused.value, "detail", refused.value)))
