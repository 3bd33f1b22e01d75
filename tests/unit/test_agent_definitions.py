"""Built-in agents and agent definitions read from files (DESIGN.md section 8).

The built-in ``general`` and ``explore`` are profiles of every job, resolved
by name like a job's own; ``verifier`` is reserved.  Definition files (YAML,
Markdown with front matter) in the config folder, and in a trusting job's
repository, are merged at submit time with a fixed precedence; a broken one
is a usage error naming the file.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from nahida_workers.errors import ConfigError
from nahida_workers.runtime.agents import READ_ONLY_TOOLS, builtin_profiles
from nahida_workers.runtime.agents.discover import REPOSITORY_AGENTS, read_folder, with_agents
from nahida_workers.runtime.agents.files import read_definition
from nahida_workers.runtime.dispatch.preflight import check_spec
from nahida_workers.runtime.spec import JobSpec, SessionSpec, load_job
from nahida_workers.settings import Settings
from nahida_workers.testing import scripted_spec
from nahida_workers.tools.read import Read

SCRIPT = {"kind": "scripted", "script": {"turns": [{"text": "ok"}]}}


def settings(folder: Path | None) -> Settings:
    return Settings(_env_file=None, agents_dir=str(folder) if folder else "")  # type: ignore[call-arg]


def put(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, "utf-8")
    return path


# -- built-in agents ---------------------------------------------------------------------------


def test_every_job_has_general_and_explore_resolved_by_name() -> None:
    spec = scripted_spec([{"text": "x"}], tools=["Read", "Bash", "Task"])
    assert sorted(spec.agents) == ["explore", "general"]
    general = spec.child_spec("general", "do it")
    assert general.tools == ("Read", "Bash", "Task")  # the job's tools
    assert general.provider == spec.provider and general.limits == spec.limits
    explore = spec.child_spec("explore", "look")
    assert explore.tools == READ_ONLY_TOOLS
    # a job's own definition of a built-in name replaces it
    mine = {"tools": ["Read"], "provider": SCRIPT, "description": "mine"}
    own = scripted_spec([{"text": "x"}], tools=["Task"], agents={"general": mine})
    assert own.agents["general"].description == "mine"
    assert own.agents["explore"] == builtin_profiles()["explore"]
    # the snapshot round-trips (a worker re-validates it)
    assert SessionSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_the_verifier_is_reserved(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'verifier' is reserved"):
        scripted_spec([{"text": "x"}], tools=["Task"], agents={"verifier": {"tools": ["Read"]}})
    job = tmp_path / "job.yaml"
    job.write_text("prompt: p\ntools: [Task]\nagents:\n  verifier: {tools: [Read]}\n", "utf-8")
    with pytest.raises(ConfigError, match=f"invalid job file {job}: agents:.*reserved"):
        load_job(job)
    spec = scripted_spec([{"text": "x"}], tools=["Task"])
    with pytest.raises(KeyError):
        spec.child_spec("verifier", "x")
    verifier = spec.verifier_spec("check this")
    assert verifier.tools == READ_ONLY_TOOLS and verifier.contract.output_schema is not None
    assert verifier.system_prompt and "verdict" in verifier.system_prompt.lower()


def test_the_verifiers_provider_is_the_jobs_unless_configured() -> None:
    other = {"kind": "scripted", "script": {"turns": [{"text": "second"}]}}
    spec = scripted_spec(
        [{"text": "x"}],
        tools=["Task"],
        verification={"provider": SCRIPT, "next_providers": [other]},
    )
    assert spec.verifier_spec("p", 1).provider == SCRIPT
    assert spec.verifier_spec("p", 2).provider == other
    assert spec.verifier_spec("p", 5).provider == other  # the last one repeats
    plain = scripted_spec([{"text": "x"}], tools=["Task"])
    assert plain.verifier_spec("p").provider == plain.provider


class WritingRead(Read):
    """A plugin registered under a read-only tool's name that says it writes."""

    def __init__(self) -> None:
        super().__init__()
        self.spec = replace(self.spec, read_only=False)


def test_a_verifier_whose_tools_may_write_is_refused() -> None:
    spec = scripted_spec([{"text": "x"}], tools=["Task"], verification={"provider": SCRIPT})
    check_spec(spec, settings(None))
    plugged = Settings(  # type: ignore[call-arg]
        _env_file=None, agents_dir="", extra_tools=[f"{__name__}:WritingRead"]
    )
    # The verifier is a reviewer (tool_profile): a writing Read is above its ceiling.
    with pytest.raises(ConfigError, match=r"tool Read is a write tool; tool_profile reviewer"):
        check_spec(spec, plugged)
    # a job that can start no verifier is not checked for one
    check_spec(scripted_spec([{"text": "x"}], tools=["Glob"]), plugged)


def test_delegation_rules_are_checked_against_the_tools() -> None:
    with pytest.raises(ValueError, match="forbid contradicts offering the Task tool"):
        scripted_spec([{"text": "x"}], tools=["Task"], delegation={"mode": "forbid"})
    with pytest.raises(ValueError, match="require needs the Task tool"):
        scripted_spec([{"text": "x"}], tools=["Read"], delegation={"mode": "require"})
    with pytest.raises(ValueError, match="need mode: require"):
        scripted_spec([{"text": "x"}], tools=["Task"], delegation={"areas": ["a"]})
    with pytest.raises(ValueError, match="distinct"):
        scripted_spec(
            [{"text": "x"}], tools=["Task"], delegation={"mode": "require", "areas": ["a", "a"]}
        )


# -- one definition file -------------------------------------------------------------------------


def test_yaml_and_markdown_definitions(tmp_path: Path) -> None:
    name, profile = read_definition(
        put(tmp_path, "tester.yaml", "description: Runs tests\ntools: [Read, Bash]\n")
    )
    assert name == "tester" and profile.tools == ("Read", "Bash")
    assert profile.provider is None and profile.limits is None  # the job's own
    name, profile = read_definition(
        put(
            tmp_path,
            "doc-writer.md",
            "---\nname: docs\ntools: [Read, Write]\n---\nYou write docs.\n\nKeep them short.\n",
        )
    )
    assert name == "docs" and profile.system_prompt == "You write docs.\n\nKeep them short."


def test_a_definition_may_name_a_tool_profile(tmp_path: Path) -> None:
    """docs/concepts/context.md: the profile picks the tools when none are listed."""
    name, profile = read_definition(
        put(
            tmp_path,
            "security-reviewer.md",
            "---\ndescription: Reviews diffs.\ntool_profile: reviewer\n---\nYou review.\n",
        )
    )
    assert name == "security-reviewer" and profile.tool_profile == "reviewer"
    assert profile.tools == ("Read", "Glob", "Grep", "LS")
    job = scripted_spec([{"text": "x"}], tools=["Task"], agents={name: profile})
    assert job.child_spec(name, "review").tools == ("Read", "Glob", "Grep", "LS")


BROKEN = [
    ("bad.yaml", "tools: [Read\n", "invalid YAML"),
    ("bad.yaml", "tool_profile: admin\n", "tool_profile"),
    ("bad.yaml", "- a list\n", "must be a mapping"),
    ("bad.yaml", "stop_hooks: [os:system]\n", "stop_hooks: Extra inputs"),
    ("bad.yaml", "tools: ['os:system']\n", "never names code"),
    ("bad.yaml", "tools: [pkg.mod.Tool]\n", "never names code"),
    ("verifier.yaml", "tools: [Read]\n", "'verifier' is reserved"),
    ("Bad Name.yaml", "tools: [Read]\n", "must be lower-case"),
    ("bad.md", "no front matter here\n", "starts with front matter"),
    ("bad.md", "---\nsystem_prompt: a\n---\nand a body\n", "give the system prompt once"),
    ("bad.yaml", "limits: {max_steps: 0}\n", "limits.max_steps"),
]


@pytest.mark.parametrize(("file", "text", "needle"), BROKEN)
def test_a_broken_definition_names_its_file(
    tmp_path: Path, file: str, text: str, needle: str
) -> None:
    path = put(tmp_path, file, text)
    with pytest.raises(ConfigError) as caught:
        read_definition(path)
    assert str(path) in str(caught.value) and needle in str(caught.value)


def test_oversized_and_non_utf8_definitions_are_refused(tmp_path: Path) -> None:
    big = put(tmp_path, "big.yaml", "description: " + "x" * 70_000 + "\n")
    with pytest.raises(ConfigError, match=f"{big}: larger than"):
        read_definition(big)
    raw = tmp_path / "raw.yaml"
    raw.write_bytes(b"description: \xff\n")
    with pytest.raises(ConfigError, match=f"{raw}: not UTF-8"):
        read_definition(raw)


# -- folders and the merge -------------------------------------------------------------------------


def test_a_folder_with_one_name_twice_is_refused(tmp_path: Path) -> None:
    put(tmp_path, "a.yaml", "name: dup\n")
    put(tmp_path, "b.md", "---\nname: dup\n---\nbody\n")
    put(tmp_path, "notes.txt", "ignored: other suffixes are not definitions\n")
    with pytest.raises(ConfigError, match="'dup' is defined twice"):
        read_folder(tmp_path)


def test_a_script_file_path_in_a_definition_is_refused(tmp_path: Path) -> None:
    put(tmp_path, "a.yaml", "provider: {kind: scripted, script: /etc/passwd.yaml}\n")
    with pytest.raises(ConfigError, match=r"provider\.script must be inline"):
        read_folder(tmp_path)


def test_precedence_builtin_repository_config_job(tmp_path: Path) -> None:
    config, repo = tmp_path / "config", tmp_path / "repo"
    put(config, "general.yaml", "description: operator's general\n")
    put(config, "shared.yaml", "description: operator's shared\n")
    put(repo / REPOSITORY_AGENTS, "shared.yaml", "description: repo's shared\n")
    put(repo / REPOSITORY_AGENTS, "local.yaml", "description: repo's own\n")
    put(repo / REPOSITORY_AGENTS, "mine.yaml", "description: repo's mine\n")
    mine = {"description": "the job's", "provider": SCRIPT, "tools": ["Read"]}
    spec = scripted_spec([{"text": "x"}], tools=["Read", "Task"], agents={"mine": mine})
    merged = with_agents(spec, settings=settings(config), workspace=repo)
    described = {n: p.description for n, p in merged.agents.items()}
    assert "local" not in described, "the repository is read only when the job trusts it"
    assert described["general"] == "operator's general"  # a definition replaces a built-in
    trusting = spec.model_copy(update={"trust_workspace": True})
    merged = with_agents(trusting, settings=settings(config), workspace=repo)
    described = {n: p.description for n, p in merged.agents.items()}
    assert described == {
        "explore": builtin_profiles()["explore"].description,
        "general": "operator's general",
        "shared": "operator's shared",  # the operator's config beats the repository
        "local": "repo's own",
        "mine": "the job's",  # the job's own always wins
    }
    assert merged.child_spec("local", "p").tools == spec.tools  # its tools: the job's
    # nothing to merge: the same object back
    assert with_agents(spec, settings=settings(None)) is spec


def test_definitions_are_checked_like_the_jobs_profiles(tmp_path: Path) -> None:
    config = tmp_path / "config"
    path = put(config, "typo.yaml", "tools: [Raed]\n")
    spec = scripted_spec([{"text": "x"}], tools=["Read", "Task"])
    with pytest.raises(ConfigError, match=f"agent definition {path}: .*unknown tool 'Raed'"):
        with_agents(spec, settings=settings(config))
    path.write_text(
        "tools: [Read]\nprovider: {kind: scripted, script: {turns: "
        "[{tool_calls: [{id: a, name: Bash, arguments: {command: ls}}]}]}}\n",
        "utf-8",
    )
    with pytest.raises(
        ConfigError, match=f"agent definition {path}: .*does not offer: \\['Bash'\\]"
    ):
        with_agents(spec, settings=settings(config))


def test_a_repository_folder_leading_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    put(outside, "x.yaml", "description: outside\n")
    repo = tmp_path / "repo"
    (repo / ".nahida").mkdir(parents=True)
    os.symlink(outside, repo / REPOSITORY_AGENTS)
    spec = scripted_spec([{"text": "x"}], tools=["Read", "Task"], trust_workspace=True)
    with pytest.raises(ConfigError, match="leads out of the workspace"):
        with_agents(spec, settings=settings(None), workspace=repo)
    os.unlink(repo / REPOSITORY_AGENTS)
    put(repo / REPOSITORY_AGENTS, "ok.yaml", "description: inside\n")
    os.symlink(outside / "x.yaml", repo / REPOSITORY_AGENTS / "link.yaml")
    with pytest.raises(ConfigError, match=r"link\.yaml leads out of the workspace"):
        with_agents(spec, settings=settings(None), workspace=repo)


def test_a_job_spec_stays_a_job_spec() -> None:
    job = JobSpec.model_validate({"name": "j", "prompt": "p", "tools": ["Read", "Task"]})
    merged = with_agents(job, settings=settings(None))
    assert isinstance(merged, JobSpec)


def test_the_shipped_config_folder_is_valid() -> None:
    """``config/agents`` (the default ``NAHIDA_AGENTS_DIR``) holds working definitions."""
    root = Path(__file__).resolve().parents[2]
    found = read_folder(root / "config" / "agents")
    assert "test-reviewer" in found
    spec = scripted_spec([{"text": "x"}], tools=["Read", "Task"])
    merged = with_agents(spec, settings=settings(root / "config" / "agents"))
    reviewer = merged.child_spec("test-reviewer", "review the tests")
    assert reviewer.tools == ("Read", "Glob", "Grep", "LS")
    assert reviewer.system_prompt is not None and "test suite" in reviewer.system_prompt
