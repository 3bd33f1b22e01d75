"""A job's team tools are checked at submit time like every tool (DESIGN.md section 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.errors import ConfigError
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.spec import SessionSpec, load_job
from nahida_workers.settings import Settings

JOB = Path(__file__).parents[3] / "config" / "jobs" / "team-refactor.yaml"


def test_the_example_team_job_passes_the_submit_check() -> None:
    check_spec(load_job(JOB).session_spec(), Settings())


def test_a_script_calling_a_team_tool_its_profile_does_not_offer_is_refused() -> None:
    data = load_job(JOB).session_spec().model_dump(mode="json")
    profile = data["agents"]["refactorer"]
    profile["tools"] = [t for t in profile["tools"] if t != "TeamTaskClaim"]
    with pytest.raises(ConfigError, match="TeamTaskClaim"):
        check_spec(SessionSpec.model_validate(data), Settings())


def test_a_lead_script_starting_an_undefined_member_agent_is_refused() -> None:
    data = load_job(JOB).session_spec().model_dump(mode="json")
    data["agents"] = {"other": data["agents"]["refactorer"]}
    with pytest.raises(ConfigError, match="refactorer"):
        check_spec(SessionSpec.model_validate(data), Settings())
