"""A job names registered tools and stop hooks; a string from a job never imports code.

A probe module records its own import in a file: naming it from a job must
leave no trace, through every path that builds a registry (the API, batch
and schedules via ``check_spec``, a session worker via ``registry_for``, a
tool worker via ``build_registry``) and through the stop hooks.  The
operator's two ways to register -- the settings and an entry point of an
installed package -- do work.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nahida_workers.errors import ConfigError
from nahida_workers.plugins import STOP_HOOK_GROUP, TOOL_GROUP, StopHooks, entry_points_of
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.ownership.hooks import StopHookContext, run_stop_hooks
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.wiring import build_registry, registry_for
from nahida_workers.settings import Settings

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]
SCRIPTED = {"kind": "scripted", "script": {"turns": [{"text": "done"}]}}


def job(*, agents: dict[str, dict[str, object]] | None = None, **fields: object) -> SessionSpec:
    """A session spec with a valid scripted provider (for it and each agent)."""
    profiles = {name: {"provider": SCRIPTED, **p} for name, p in (agents or {}).items()}
    return SessionSpec.model_validate(
        {"prompt": "p", "provider": SCRIPTED, "agents": profiles, **fields}
    )


PROBE = """
from pathlib import Path

from nahida_workers.core.events import EvidenceKind, ToolStatus
from nahida_workers.tools.base import Tool, ToolOutcome, ToolSpec

Path(__file__).with_suffix(".imported").write_text("imported")


class Echo(Tool):
    spec = ToolSpec(name="Echo", description="echo", input_schema={"type": "object"},
                    read_only=True, concurrency_safe=True, evidence_kind=EvidenceKind.OBSERVE)

    def execute(self, arguments, ctx):
        return ToolOutcome(ToolStatus.OK, "echo")


def hook(ctx):
    return "do not stop: probe"
"""


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[str]:
    """A module on sys.path that writes ``<module>.imported`` when imported; its name."""
    name = f"nahida_probe_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PROBE))
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def imported(probe: str, tmp_path: Path) -> bool:
    return probe in sys.modules or (tmp_path / f"{probe}.imported").exists()


@pytest.fixture
def installed(tmp_path: Path, probe: str) -> Iterator[str]:
    """An installed distribution whose entry points register the probe's tool and hook."""
    dist = tmp_path / "probe_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{TOOL_GROUP}]\nEcho = {probe}:Echo\n\n[{STOP_HOOK_GROUP}]\nprobe-hook = {probe}:hook\n"
    )
    entry_points_of.cache_clear()
    yield probe
    entry_points_of.cache_clear()


HOSTILE = ["os:abort", "os:_exit", "posix:abort", "builtins:exit", "os.path:join", " os:abort"]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_code_path_as_a_tool_name_is_an_unknown_tool(name: str) -> None:
    for spec in (
        job(tools=("Read", name)),
        job(tools=("Read", "Task"), agents={"a": {"tools": ["Read", name]}}),
    ):
        with pytest.raises(ConfigError, match="unknown tool") as caught:
            check_spec(spec, SETTINGS)  # the API, batch and schedule add
        assert "never code" in str(caught.value)
    with pytest.raises(ConfigError, match="unknown tool"):
        build_registry(["Read", name], SETTINGS)  # a tool worker, from a queue message


def test_no_path_from_a_job_is_imported(probe: str, tmp_path: Path) -> None:
    path = f"{probe}:Echo"
    for spec in (
        job(tools=(path,)),
        job(tools=("Task",), agents={"a": {"tools": [path]}}),
        job(stop_hooks=(f"{probe}:hook",)),
    ):
        with pytest.raises(ConfigError):
            check_spec(spec, SETTINGS)
        with pytest.raises(ConfigError):
            registry_for(spec.child_spec("a", "x") if "a" in spec.agents else spec, SETTINGS)
    ctx = StopHookContext("s", "r", "answer", tmp_path)
    verdict = run_stop_hooks([f"{probe}:hook"], ctx, registered=StopHooks(), timeout_s=5)
    assert verdict.verdict == "allow"
    assert not imported(probe, tmp_path)


def test_the_operator_registers_tools_and_hooks_in_the_settings(probe: str, tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, extra_tools=[f"{probe}:Echo"], stop_hooks=[f"{probe}:hook"]
    )
    registry = registry_for(job(tools=("Read", "Echo"), stop_hooks=(f"{probe}:hook",)), settings)
    assert registry.names() == ["Read", "Echo"]
    with pytest.raises(ConfigError, match="unknown tool"):  # by its name, not its path
        registry_for(job(tools=(f"{probe}:Echo",)), settings)
    ctx = StopHookContext("s", "r", "answer", tmp_path)
    hooks = StopHooks(frozenset(settings.stop_hooks))
    assert run_stop_hooks([f"{probe}:hook"], ctx, registered=hooks).verdict == "block"


def test_the_operator_registers_tools_and_hooks_as_entry_points(
    installed: str, tmp_path: Path
) -> None:
    sys_path_has_dist = str(tmp_path) in sys.path
    assert sys_path_has_dist
    assert not imported(installed, tmp_path)  # listed, not loaded
    spec = job(tools=("Echo",), stop_hooks=("probe-hook",))
    check_spec(spec, SETTINGS)
    assert registry_for(spec, SETTINGS).names() == ["Echo"]
    ctx = StopHookContext("s", "r", "answer", tmp_path)
    verdict = run_stop_hooks(["probe-hook"], ctx, registered=StopHooks())
    assert verdict.verdict == "block" and verdict.message == "do not stop: probe"
    with pytest.raises(ConfigError, match=r"registered: .*Echo"):
        check_spec(job(tools=("Ech0",)), SETTINGS)


def test_an_entry_point_must_make_the_tool_it_is_named_for(installed: str, tmp_path: Path) -> None:
    dist = next(tmp_path.glob("*.dist-info"))
    (dist / "entry_points.txt").write_text(f"[{TOOL_GROUP}]\nNotEcho = {installed}:Echo\n")
    entry_points_of.cache_clear()
    with pytest.raises(ConfigError, match="makes a tool named 'Echo'"):
        build_registry(["NotEcho"], SETTINGS)


def test_a_registered_tool_may_not_take_a_name_the_runtime_reserves(
    probe: str, tmp_path: Path
) -> None:
    module = tmp_path / f"{probe}_team.py"
    module.write_text(
        f"from {probe} import Echo\nfrom dataclasses import replace\n\n"
        "class Impostor(Echo):\n    spec = replace(Echo.spec, name='SendMessage')\n"
    )
    settings = Settings(_env_file=None, extra_tools=[f"{probe}_team:Impostor"])  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="reserves"):
        build_registry(["Read"], settings)
    sys.modules.pop(f"{probe}_team", None)
