"""Every run ends in exactly one terminal state, also when the config or the code is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.core.messages import ProviderRequest, ProviderTurn
from nahida_workers.runtime.wiring import provider_for, registry_for
from nahida_workers.settings import Settings
from nahida_workers.testing import memory_runner, run_inline, scripted_spec

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]


def _real_wiring() -> Any:
    return memory_runner(
        provider_for=provider_for, registry_for=lambda spec: registry_for(spec, SETTINGS)
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider": {"kind": "scriptd", "script": {"turns": [{"text": "x"}]}}},
        {"tools": ("Read", "Bsh")},
        {"placement": {"Glob": "everywhere"}},
    ],
    ids=["provider-kind-typo", "unknown-tool", "bad-placement"],
)
def test_a_config_error_ends_the_run_failed_invalid_config(
    overrides: dict[str, Any], tmp_path: Path
) -> None:
    spec = scripted_spec([{"text": "hi"}], **overrides)
    result = run_inline(spec, tmp_path, runner=_real_wiring())
    terminals = [e for e in result.events if e.type is EventType.TERMINAL]
    assert len(terminals) == 1 and result.events[-1] is terminals[0]
    run = result.run
    assert (run.terminal_state, run.terminal_reason, run.failure_code) == (
        "failed",
        "invalid_config",
        "invalid_config",
    )
    assert result.session.status.value == "done"


class _Broken:
    name = model = "broken"

    def complete(
        self, request: ProviderRequest, *, on_text: Any = None, on_tool_call: Any = None
    ) -> ProviderTurn:
        raise RuntimeError("a bug in an adapter")


def test_an_unexpected_exception_ends_the_run_failed_internal_error(tmp_path: Path) -> None:
    runner = memory_runner(provider_for=lambda spec: _Broken())
    result = run_inline(scripted_spec([{"text": "hi"}]), tmp_path, runner=runner)
    assert (result.run.terminal_state, result.run.terminal_reason) == ("failed", "internal_error")
    assert [e.type for e in result.events][-1] is EventType.TERMINAL
