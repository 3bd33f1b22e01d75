"""CLI start-up: whole-process wall time of ``nahida --help`` and ``nahida status --local``.

Target: each <= 0.5 s, median of 7.  Every run is a fresh process of
the installed console script (the interpreter, imports, the command, exit),
timed from ``fork`` to ``wait``.  ``status --local`` reads a SQLite ledger
made by one small local batch first (so it lists a batch and its sessions,
not an empty file), in a scratch directory.

    .venv/bin/python -m bench.cli_startup            # prints medians, marks the target
    .venv/bin/python -m bench.cli_startup --quick    # 2 runs each (the suite's smoke test)

Also ``python -X importtime -m nahida_workers.cli status --local`` shows what
a command imports.  Exit status: 0 (the figures are reported, not asserted).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5


def nahida_script() -> str:
    """The installed ``nahida`` console script next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "nahida"
    if beside.exists():
        return str(beside)
    found = shutil.which("nahida")
    if found is None:
        raise SystemExit("the nahida console script is not installed (pip install -e .)")
    return found


def time_command(argv: list[str], *, cwd: Path, env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` fresh processes of ``argv``; each must exit 0."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return times


def seed_ledger(script: str, workdir: Path, env: dict[str, str]) -> None:
    """One local batch over one small git repository, so ``status`` has rows to show."""
    repo = workdir / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# Demo\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    job = ROOT / "config" / "jobs" / "repo-survey.yaml"
    subprocess.run(
        [script, "batch", str(job), "--local", "--repo", str(repo)],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Measure and print the medians; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 runs each")
    args = parser.parse_args(argv)
    runs = 2 if args.quick else args.runs
    script = nahida_script()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env["NAHIDA_ENV_FILE"] = "/dev/null"
    # A regular ``pip install`` byte-compiles the package; an editable one
    # writes __pycache__ at first import -- unless PYTHONDONTWRITEBYTECODE is
    # set (it is on this machine), when every start compiles ~30 modules
    # again (~30 ms).  Compile once, as an install would.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            str(ROOT / "nahida_workers"),
            str(ROOT / "tasks"),
        ],
        check=True,
    )
    with tempfile.TemporaryDirectory(prefix="nahida-cli-startup-") as tmp:
        workdir = Path(tmp)
        seed_ledger(script, workdir, env)
        print(f"nahida CLI start-up, median of {runs} whole-process runs ({script})")
        baseline = time_command([sys.executable, "-c", "pass"], cwd=workdir, env=env, runs=runs)
        print(f"  {'python -c pass (interpreter alone)':<34} {statistics.median(baseline):.3f} s")
        for label, command in (
            ("nahida --help", ["--help"]),
            ("nahida status --local", ["status", "--local"]),
        ):
            times = time_command([script, *command], cwd=workdir, env=env, runs=runs)
            median = statistics.median(times)
            mark = "met" if median <= TARGET_S else "MISSED"
            spread = f"min {min(times):.3f} max {max(times):.3f}"
            print(f"  {label:<34} {median:.3f} s  ({spread}; target <= {TARGET_S} s: {mark})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
