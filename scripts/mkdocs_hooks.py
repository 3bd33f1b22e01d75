"""MkDocs hooks: the reference pages, generated from the code at every build.

    .venv/bin/mkdocs build --strict          # mkdocs.yml names this file under `hooks:`
    .venv/bin/python scripts/mkdocs_hooks.py cli|api|job   # print one page

Three pages are never written by hand, so they cannot drift from the code:

* ``reference/cli.md`` -- typer's own Markdown generator (``python -m typer
  nahida_workers.cli.main utils docs``, typer's documented "generate docs"
  command) over the ``nahida`` app: every command, argument, option, default
  and help string as ``nahida --help`` prints them.
* ``reference/job-file.md`` -- every field of a job file, its type and default,
  read from the pydantic models that validate a job (``JobSpec``, ``Limits``,
  ``CompletionContract``, ``AgentProfile``) and described by their docstrings.
* ``reference/api.md`` -- the OpenAPI schema of the very app ``nahida serve``
  builds (``nahida_workers.api.server.build_app``), rendered to Markdown by
  essentials-openapi: every route, parameter, body schema and example.  The app
  is built over a throwaway SQLite URL; building it opens no connection.

Both need the package installed with the ``docs`` extra (``pip install -e
'.[docs]'``; ``.[dev]`` includes it).
"""

from __future__ import annotations

import enum
import fnmatch
import inspect
import re
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

CLI_PAGE = "reference/cli.md"
API_PAGE = "reference/api.md"
JOB_PAGE = "reference/job-file.md"

CLI_INTRO = """\
Generated at build time from the `nahida` command itself (typer's documentation
generator over `nahida_workers.cli.main:app`), so it shows exactly what
`nahida COMMAND --help` shows. Exit codes: [Exit codes](exit-codes.md).
Every command takes `--debug` anywhere on its command line (a traceback
instead of the one-line error).

"""

API_INTRO = """\
# API reference

Generated at build time from the OpenAPI schema of the app `nahida serve`
runs (`nahida_workers.api.server.build_app`), so every route below exists and
no route is missing. A running server serves the same schema at
`/openapi.json` and interactive docs at `/docs`. How to run, secure and use
the API: [The HTTP API and the web view](../api.md).

"""


def cli_markdown() -> str:
    """The CLI reference page: typer's generated docs for ``nahida``, one section per command.

    Raises:
        RuntimeError: typer's generator failed (its stderr is in the message).
    """
    command = [
        sys.executable,
        "-m",
        "typer",
        "--app",
        "app",
        "nahida_workers.cli.main",
        "utils",
        "docs",
        "--name",
        "nahida",
        "--title",
        "CLI reference",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or not done.stdout.startswith("# CLI reference"):
        raise RuntimeError(f"typer utils docs failed ({done.returncode}): {done.stderr.strip()}")
    title, _, body = done.stdout.partition("\n\n")
    return f"{title}\n\n{CLI_INTRO}{body}"


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI document of the app ``nahida serve`` builds (no server, no connection)."""
    from nahida_workers.api.server import build_app
    from nahida_workers.settings import Settings

    with tempfile.TemporaryDirectory(prefix="nahida-docs-") as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'schema.sqlite3'}")
        schema: dict[str, Any] = build_app(settings).openapi()
    return schema


def api_markdown(schema: dict[str, Any] | None = None) -> str:
    """The API reference page: ``schema`` (default: the app's) rendered by essentials-openapi."""
    from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler

    rendered = OpenAPIV3DocumentationHandler(schema or openapi_schema(), style="MKDOCS").write()
    # Its first lines are a generator comment and an H1 of the API's title: the page
    # has its own title and intro instead.
    body = rendered.split("\n")
    while body and not body[0].startswith("# "):
        body.pop(0)
    return API_INTRO + "\n".join(body[1:]).lstrip("\n")


JOB_INTRO = """\
# Job file fields

Generated at build time from the pydantic models that validate a job file
(`nahida_workers/runtime/spec.py`, `nahida_workers/core/events.py`), so every
field, type and default below is the one `nahida batch` applies; a field not
listed here is refused (`extra="forbid"`). How to write a job: [Job
files](../jobs/job-files.md).

"""


#: Where a nested model's fields are listed (its section title on the page).
SECTION_OF = {
    "Limits": "`limits`",
    "CompletionContract": "`contract`",
    "AgentProfile": "`agents.NAME`",
    "DelegationSpec": "`delegation`",
    "VerificationSpec": "`verification`",
}


def _attribute_docs(model: type) -> dict[str, str]:
    """``name pattern -> description`` from the ``Attributes:`` section of a class docstring.

    An entry may name several fields (``a / b / c: ...``, wrapped over lines) or a
    pattern (``*_corrections``); continuation lines are joined.
    """
    doc = inspect.getdoc(model) or ""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    entries: list[str] = []
    for line in section.splitlines():
        if line and not line.startswith(" "):
            break  # the next section
        stripped = line.strip()
        if not stripped:
            continue
        joins = entries and (line.startswith("        ") or entries[-1].endswith("/"))
        if joins:
            entries[-1] += " " + stripped
        else:
            entries.append(stripped)
    described: dict[str, str] = {}
    for entry in entries:
        names, _, text = entry.partition(": ")
        for name in names.split("/"):
            described[name.strip()] = text.strip()
    return described


def _type_name(annotation: Any) -> str:
    """A field's type as a reader writes it in YAML."""
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{member.value}`" for member in annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    name = getattr(annotation, "__name__", str(annotation))
    if name in SECTION_OF:
        title = SECTION_OF[name]
        return f"mapping: [{title}](#{title.strip('`').replace('.', '').lower()})"
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(name, name)


#: Defaults a loader applies before validation, which the model cannot show.
LOADER_DEFAULTS = {
    ("JobSpec", "name"): "a job file's name without its suffix (over the API: **required**)",
}


def _default(model: type, name: str, field: Any) -> str:
    from pydantic import BaseModel

    if (model.__name__, name) in LOADER_DEFAULTS:
        return LOADER_DEFAULTS[(model.__name__, name)]
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    if value is None or isinstance(value, bool):
        return f"`{str(value).lower() if value is not None else 'null'}`"
    text = str(value).replace("'", "")
    return f"`{text}`" if text else '`""`'


def job_markdown() -> str:
    """The job-file reference: one table per model (field, type, default, description)."""
    from pydantic import BaseModel

    from nahida_workers.core.events import CompletionContract
    from nahida_workers.runtime.spec import (
        AgentProfile,
        DelegationSpec,
        JobSpec,
        Limits,
        SessionSpec,
        VerificationSpec,
    )

    sections: list[tuple[str, type[BaseModel], str, type[BaseModel] | None]] = [
        ("The job", JobSpec, "Top-level keys of a job file.", SessionSpec),
        ("`limits`", Limits, "Bounds of one run.", None),
        ("`contract`", CompletionContract, "What a run must prove before `completed`.", None),
        ("`agents.NAME`", AgentProfile, "A profile the `Task` tool may start.", None),
        ("`delegation`", DelegationSpec, "What the job requires or forbids of `Task`.", None),
        (
            "`verification`",
            VerificationSpec,
            "The independent verification gate and the reserved verifier.",
            None,
        ),
    ]
    out = [JOB_INTRO]
    for title, model, summary, docs_from in sections:
        described = {**_attribute_docs(docs_from or model), **_attribute_docs(model)}
        out.append(
            f"## {title}\n\n{summary}\n\n| field | type | default | what |\n|---|---|---|---|"
        )
        for name, field in model.model_fields.items():
            text = described.get(name) or next(
                (t for pattern, t in described.items() if fnmatch.fnmatch(name, pattern)), ""
            )
            text = re.sub(r"(?::\w+:)?``?([^`]+)``?", r"`\1`", text).replace("|", "\\|")
            text = text.replace("as in `SessionSpec`", "as in the job")
            kind, default = _type_name(field.annotation), _default(model, name, field)
            out.append(f"| `{name}` | {kind} | {default} | {text} |")
        out.append("")
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated reference pages to the build."""
    from mkdocs.structure.files import File

    pages = ((CLI_PAGE, cli_markdown()), (API_PAGE, api_markdown()), (JOB_PAGE, job_markdown()))
    for page, content in pages:
        files.append(File.generated(config, page, content=content))
    return files


def main(argv: list[str]) -> int:
    """Print the page named by ``argv[0]`` (``cli``, ``api`` or ``job``)."""
    pages = {"cli": cli_markdown, "api": api_markdown, "job": job_markdown}
    if len(argv) != 1 or argv[0] not in pages:
        print("usage: mkdocs_hooks.py cli|api|job", file=sys.stderr)
        return 2
    print(pages[argv[0]](), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
