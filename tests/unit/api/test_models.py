"""The request models of /v1 (nahida_workers/api/models.py) against the specs they feed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from nahida_workers.api import models
from nahida_workers.core.messages import Usage
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.scripted import (
    Script,
    ScriptedCall,
    ScriptError,
    ScriptExpect,
    ScriptTurn,
)
from nahida_workers.runtime.spec import AgentProfile, JobSpec, MemorySpec


@pytest.mark.parametrize(
    ("api", "core"),
    [
        (models.ScriptIn, Script),
        (models.ScriptTurnIn, ScriptTurn),
        (models.ScriptedCallIn, ScriptedCall),
        (models.ScriptErrorIn, ScriptError),
        (models.ScriptExpectIn, ScriptExpect),
        (models.UsageIn, Usage),
    ],
)
def test_the_script_models_have_the_fields_of_the_scripted_provider(
    api: type[BaseModel], core: type[BaseModel]
) -> None:
    assert set(api.model_fields) == set(core.model_fields)


def test_the_job_model_names_every_field_of_a_job_and_an_agent_profile() -> None:
    assert set(models.JobIn.model_fields) == set(JobSpec.model_fields)
    assert set(models.AgentProfileIn.model_fields) == set(AgentProfile.model_fields)
    assert set(models.MemoryIn.model_fields) == set(MemorySpec.model_fields)
    provider_fields = set(ProviderConfig.model_fields)
    for variant in (models.ScriptedProviderIn, models.OpenAIProviderIn):
        assert set(variant.model_fields) <= provider_fields


FULL: dict[str, Any] = {
    "name": "n",
    "prompt": "p",
    "system_prompt": "s",
    "provider": {
        "kind": "scripted",
        "model": "label",
        "script": {
            "turns": [
                {
                    "text": "t",
                    "tool_calls": [{"id": "c1", "name": "Read", "arguments": {"path": "x"}}],
                    "usage": {"input_tokens": 1},
                    "stop_reason": "tool_calls",
                },
                {"error": {"status": 429, "retry_after": 1.5}},
            ],
            "next_runs": [[{"text": "again"}]],
        },
        "fallbacks": [{"kind": "openai", "model": "m", "max_retries": 1}],
    },
    "tools": ["Read", "Task"],
    "placement": {"Read": "local"},
    "contract": {"evidence": "observe", "output_schema": {"type": "object"}},
    "limits": {"max_steps": 3},
    "channel": "progress_updates",
    "agents": {
        "helper": {"provider": {"kind": "anthropic", "model": "c"}, "tools": ["Read"]},
        "twin": {"provider": None, "tools": None, "limits": None},  # the parent's own
    },
    "goal": "make it green",
    "delegation": {"mode": "require", "areas": ["api", "docs"]},
    "verification": {"provider": {"kind": "openai", "model": "v"}, "min_files": 2},
    "trust_workspace": False,
}


def test_a_job_the_model_takes_is_a_job_spec_and_its_provider_a_provider_config() -> None:
    job = models.JobIn.model_validate_json(json.dumps(FULL), strict=True)
    spec = JobSpec.model_validate(job.job_data())
    assert spec.tools == ("Read", "Task") and spec.limits.max_steps == 3
    ProviderConfig.model_validate(spec.provider)
    Script.model_validate(spec.provider["script"])
    ProviderConfig.model_validate(spec.agents["helper"].provider)
    twin = spec.agents["twin"]
    assert twin.provider is None and twin.tools is None and twin.limits is None
    assert spec.goal == "make it green" and spec.delegation.areas == ("api", "docs")
    assert spec.verification.min_files == 2


@pytest.mark.parametrize(
    "change",
    [
        {"provider": {"kind": "scripted", "script": "turns: []"}},  # text: never parsed here
        {"provider": {"kind": "scripted", "script": "/etc/script.yaml"}},  # a path: never read
        {"provider": {"kind": "openai"}},  # no model
        {"provider": {"kind": "openai", "model": "m", "script": []}},  # a script on HTTP
        {"provider": {"script": []}},  # no kind
        {"tools": ["Read", "Read"]},
        {"limits": {"max_steps": True}},
        {"limits": {"max_steps": "3"}},
        {"contract": {"output_schema": {"type": "array"}}},
        {"unknown": 1},
    ],
)
def test_a_job_outside_the_schema_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        models.JobIn.model_validate_json(json.dumps({**FULL, **change}), strict=True)


def test_a_script_call_of_an_unknown_tool_is_refused_wherever_the_script_is() -> None:
    from fastapi import HTTPException

    from nahida_workers.api.inputs import check_tool_names

    registered = frozenset({"Read", "Task"})
    deep = {
        "kind": "openai",
        "model": "m",
        "fallbacks": [{"kind": "scripted", "script": [{"tool_calls": [{"id": "c", "name": "X"}]}]}],
    }
    job = models.JobIn.model_validate_json(
        json.dumps({**FULL, "tools": ["Read"], "verification": {"next_providers": [deep]}}),
        strict=True,
    )
    with pytest.raises(HTTPException) as refused:
        check_tool_names(job, registered)
    assert refused.value.status_code == 422
    assert str(refused.value.detail).startswith(
        "job.verification.next_providers.0.fallbacks.0.script.0.tool_calls.0.name: unknown tool 'X'"
    )
    ok = models.JobIn.model_validate_json(json.dumps({**FULL, "tools": ["Read"]}), strict=True)
    check_tool_names(ok, registered)  # Read in a turn, Task and a StructuredOutput are callable


def test_every_operation_has_an_example_request_and_answer(tmp_path: Path) -> None:
    """Issue 25: every /v1 route in the schema with examples, and each example fits its schema."""
    import jsonschema
    from fastapi.testclient import TestClient

    from nahida_workers.api.app import create_app
    from nahida_workers.api.examples import REQUESTS
    from nahida_workers.api.services import Services
    from nahida_workers.runtime.wiring import build_fleet
    from nahida_workers.settings import Settings
    from nahida_workers.testing import ListTaskQueue

    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path / 'l.sqlite3'}")
    app = create_app(Services(fleet=build_fleet(settings, ListTaskQueue()), redis=None))
    document = TestClient(app).app.openapi()  # type: ignore[attr-defined]
    components = {"components": document["components"]}
    operations = [
        op
        for path, item in document["paths"].items()
        if path.startswith("/v1/")
        for op in item.values()
    ]
    assert len(operations) >= 20
    for op in operations:
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            assert op["operationId"] in REQUESTS, op["operationId"]
            jsonschema.validate(body["example"], {**body["schema"], **components})
        answers = [
            (status, r["content"]["application/json"])
            for status, r in op["responses"].items()
            if status.startswith("2") and "application/json" in r.get("content", {})
        ]
        if op["operationId"] == "followSession":
            continue  # an event stream: its events are described, not exemplified
        examples = [(s, c) for s, c in answers if "example" in c]
        assert examples, f"{op['operationId']} has no example answer"
        for _status, content in examples:
            jsonschema.validate(content["example"], {**content["schema"], **components})
