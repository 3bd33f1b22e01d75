"""Running the installed ``nahida`` console script the way a user does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nahida_workers.testing.fleet import ROOT

SURVEY = ROOT / "config" / "jobs" / "repo-survey.yaml"


def nahida_script() -> str:
    """The console script pip installed beside this interpreter (else the one on PATH)."""
    beside = Path(sys.executable).parent / "nahida"
    if beside.exists():
        return str(beside)
    found = shutil.which("nahida")
    assert found, "the nahida console script is not installed (pip install -e .)"
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any NAHIDA_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env["NAHIDA_ENV_FILE"] = "/dev/null"
    env.update(extra)
    return env


@dataclass
class Result:
    """What one ``nahida`` process did."""

    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def one_error_line(self) -> str:
        """The single non-empty stderr line, checked to be the only one and not a traceback."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert "Traceback" not in self.output, self.output
        assert len(lines) == 1, self.output
        return lines[0]


def nahida(
    args: list[str | bytes], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> Result:
    """Run ``nahida ARGS`` to completion."""
    done = subprocess.run(
        [nahida_script(), *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        timeout=timeout,
    )
    return Result(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )
