"""The README is the way in, docs/ holds the rest, and the reference pages cannot drift.

* README.md: at most :data:`README_MAX_LINES` lines; its first two commands are
  the install-and-run command and the test command, before anything else
  (``.ci/run`` greps the test command from it); every relative link resolves.
* ``mkdocs build --strict`` -- what ``.ci/run`` builds -- succeeds into a scratch
  directory (a broken link, anchor, nav entry or included file fails it), and
  the pages ``scripts/mkdocs_hooks.py`` generates list every ``nahida``
  command, every API route and every job-file field of the code being tested.

MkDocs comes with the ``docs`` extra (``.[dev]`` includes it): without it the
build tests skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CI

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250
FIRST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && "
    ".venv/bin/python scripts/fetch_corpus.py && .venv/bin/nahida batch "
    "config/jobs/repo-survey.yaml --local --repos-from corpus/repos.txt"
)
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' "
    "&& .venv/bin/pytest -n 3 --dist loadfile"
)
#: What .ci/run greps from the README to find the test command (keep in step with it).
CI_GREP = ".venv/bin/pip install -e '.[dev]'"


def _code_lines(text: str) -> list[str]:
    """The README's command lines: indented code blocks and fenced blocks, in order."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or (line.startswith("    ") and line.strip()):
            lines.append(line.strip())
    return lines


def test_readme_is_at_most_250_lines() -> None:
    count = len(README.read_text("utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines; move detail to docs/"


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text("utf-8")
    assert _code_lines(text)[:2] == [FIRST_COMMAND, TEST_COMMAND]
    # Both come before any section: nothing but the title and one sentence each.
    head = text.split("\n## ", 1)[0].split("\n---", 1)[0]
    assert FIRST_COMMAND in head and TEST_COMMAND in head
    assert head.index(FIRST_COMMAND) < head.index(TEST_COMMAND)
    # .ci/run evaluates the first README line holding CI_GREP: it must be the test command.
    grepped = next(line for line in text.splitlines() if CI_GREP in line)
    assert grepped.strip() == TEST_COMMAND
    assert f'grep -m1 -F "{CI_GREP}" README.md' in (ROOT / ".ci" / "run").read_text("utf-8")


def test_readme_links_resolve_to_files() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text("utf-8"))
    relative = [t for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert relative, "the README links into docs/"
    missing = [t for t in relative if not (ROOT / t.split("#", 1)[0]).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site ``mkdocs build --strict`` makes from this checkout."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        message = "mkdocs-material is not installed (pip install -e '.[docs]')"
        if CI:
            pytest.fail(f"{message} (CI=true: the docs build is part of the suite)")
        pytest.skip(message)
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def _page_text(site: Path, page: str) -> str:
    """The text of a built page, tags dropped and entities decoded."""
    raw = (site / page / "index.html").read_text("utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def _command_paths(command: object, prefix: str = "") -> list[str]:
    """Every command path of a click group: ``batch``, ``runs show``, ``schedule add`` ..."""
    paths = []
    for name, sub in getattr(command, "commands", {}).items():
        path = f"{prefix}{name}"
        paths.append(path)
        paths += _command_paths(sub, f"{path} ")
    return paths


def test_the_strict_build_includes_the_readme_tour(site: Path) -> None:
    tour = _page_text(site, "tour")
    assert "Five-minute tour" in tour
    # Text from the README's tour section, included by pymdownx.snippets.
    assert "kind='parked'" in tour and "--resume BATCH_ID" in tour


def test_the_cli_reference_lists_every_command_and_option(site: Path) -> None:
    import typer

    from nahida_workers.cli.main import app

    command = typer.main.get_command(app)
    raw = (site / "reference" / "cli" / "index.html").read_text("utf-8")
    page = html.unescape(raw)
    paths = _command_paths(command)
    assert {"batch", "runs show", "schedule trigger"} <= set(paths)
    missing = [p for p in paths if f"<code>nahida {p}</code>" not in raw]
    assert not missing, f"commands missing from the CLI reference: {missing}"
    batch = command.commands["batch"]  # type: ignore[attr-defined]
    for option in (opt for param in batch.params for opt in param.opts if opt.startswith("--")):
        assert option in page


def test_the_api_reference_lists_every_route_of_the_served_app(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import openapi_schema
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    schema = openapi_schema()
    page = " ".join(_page_text(site, "reference/api").split())
    routes = [
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method in operations
    ]
    assert "POST /v1/sessions" in routes
    missing = [route for route in routes if route not in page]
    assert not missing, f"routes missing from the API reference: {missing}"


def test_the_job_file_reference_lists_every_field(site: Path) -> None:
    from nahida_workers.core.events import CompletionContract
    from nahida_workers.runtime.spec import (
        AgentProfile,
        DelegationSpec,
        JobSpec,
        Limits,
        VerificationSpec,
    )

    raw = (site / "reference" / "job-file" / "index.html").read_text("utf-8")
    for model in (
        JobSpec,
        Limits,
        CompletionContract,
        AgentProfile,
        DelegationSpec,
        VerificationSpec,
    ):
        for name in model.model_fields:
            assert f"<code>{name}</code>" in raw, f"{model.__name__}.{name} is not documented"
