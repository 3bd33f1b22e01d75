"""What ``nahida`` start-up does not do (issue 15 item 5).

The start-up figure itself is a benchmark (``python -m bench.cli_startup``),
never a wall-time threshold here; these tests pin the two causes of the
time it lost: a SQLite-only command loading the PostgreSQL driver, and typer
evaluating every command's annotations from strings on every run.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import typer.main

from nahida_workers.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_status_local_loads_no_postgresql_driver_dialect_or_orjson(tmp_path: Path) -> None:
    """SQLAlchemy's PostgreSQL dialect package imports every driver module (~25 ms)."""
    probe = (
        "import sys, json\n"
        "from nahida_workers.cli.main import main\n"
        f"sys.argv = ['nahida', 'status', '--local', '--db', {str(tmp_path / 'l.db')!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "loaded = ('psycopg', 'orjson', 'sqlalchemy.dialects.postgresql')\n"
        "print(json.dumps(sorted(m for m in loaded if m in sys.modules)))\n"
    )
    env = {**os.environ, "NAHIDA_ENV_FILE": "/dev/null"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_no_command_has_annotations_typer_must_evaluate_from_strings() -> None:
    """Typer evaluates string annotations twice per parameter per run (~20 ms)."""
    group = typer.main.get_command(app)
    stack = [group]
    seen = 0
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        callback = getattr(command, "callback", None)
        original = getattr(callback, "__wrapped__", callback)
        if original is None:
            continue
        for name, param in inspect.signature(original).parameters.items():
            seen += 1
            assert not isinstance(param.annotation, str), (
                f"{original.__module__}.{original.__qualname__}({name}) has a string annotation"
            )
    assert seen > 20
