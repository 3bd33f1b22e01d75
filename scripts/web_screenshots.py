"""Screenshots of the web console in headless Chromium, one per page, into docs/images/console/.

    .venv/bin/pip install -e '.[browser]'          # selenium (`.[dev]` includes it)
    apt-get install chromium chromium-driver       # the browser and its driver (Debian)
    .venv/bin/python scripts/web_screenshots.py [--out docs/images/console]

Builds a demo ledger in a scratch directory: a local batch of two fan-out
sessions (four 300 ms Sleep calls in parallel, then an answer), a child
session recorded under the first (queued, as a subagent's would be before it
runs), a parent that parked on two subagents (its timeline shows the parked
span and the children's lanes), a team (``config/jobs/team-refactor.yaml``
over a scratch git repository) and a schedule.  Then it starts ``nahida
serve`` on it and saves one PNG per page of :func:`pages` (``docs/console.md``
shows them) with Debian's ``chromium`` and ``chromium-driver`` through
selenium.  The browser tests (``tests/browser``) use the same pieces.

Needs selenium (the ``browser`` extra) and the two Debian packages
(``NAHIDA_CHROMIUM`` / ``NAHIDA_CHROMEDRIVER`` point elsewhere); when one is
missing it says which and how to install it, and exits 2 before doing anything.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("NAHIDA_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NAHIDA_CHROMEDRIVER", "/usr/bin/chromedriver")
#: Flags that work in a container without a GPU, a sandbox or a network.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
FANOUT_JOB = """name: fan-out demo
prompt: Wait on four things at once, then answer.
tools: ["SleepLocal"]  # registered below (NAHIDA_EXTRA_TOOLS)
provider:
  kind: scripted
  script:
    turns:
      - text: Waiting on four things in parallel.
        tool_calls:
          - {id: s1, name: SleepLocal, arguments: {ms: 300}}
          - {id: s2, name: SleepLocal, arguments: {ms: 300}}
          - {id: s3, name: SleepLocal, arguments: {ms: 300}}
          - {id: s4, name: SleepLocal, arguments: {ms: 300}}
      - text: All four waits finished.
"""
#: A lead and three members over a shared task graph (the team page's demo).
TEAM_JOB = ROOT / "config" / "jobs" / "team-refactor.yaml"
#: A parent that parks on two subagents (each sleeps 400 ms): its timeline shows
#: the parked span and the children as lanes under their Task calls.
DELEGATE_JOB = """name: delegate demo
prompt: Ask two helpers to wait, then report what they said.
tools: [Task]
contract: {evidence: none}
provider:
  kind: scripted
  script:
    turns:
      - text: Starting two helpers; I will wait for both.
        tool_calls:
          - id: helper_a
            name: Task
            arguments: &helper
              description: First helper
              prompt: "Wait, then say it's done."
              agent: waiter
              mode: foreground
              isolation: shared
          - id: helper_b
            name: Task
            arguments: {<<: *helper, description: Second helper}
      - text: Both helpers finished; their answers are the Task results above.
agents:
  waiter:
    system_prompt: You wait, then answer.
    tools: [SleepLocal]
    contract: {evidence: none}
    provider:
      kind: scripted
      script:
        turns:
          - text: Waiting a moment.
            tool_calls:
              - {id: nap, name: SleepLocal, arguments: {ms: 400}}
          - text: "Done: I waited 400 ms, and it's over."
"""


@dataclass
class Demo:
    """The ids of the demo ledger."""

    db: Path
    batch_id: str
    session_id: str
    run_id: str
    child_id: str
    parent_session_id: str = ""
    parent_run_id: str = ""
    schedule: str = ""
    team_id: str = ""


def _env(db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAHIDA_")}
    env.update(
        NAHIDA_ENV_FILE="/dev/null",
        NAHIDA_DATABASE_URL=f"sqlite:///{db}",
        NAHIDA_BROKER_URL="memory://localhost/",
        NAHIDA_RESULT_BACKEND_URL="cache+memory://localhost/",
        NAHIDA_REDIS_URL="fakeredis://",
        NAHIDA_REMOTE_TOOLS="false",
        NAHIDA_EXTRA_TOOLS='["nahida_workers.testing.tools:SleepLocal"]',
    )
    return env


def _nahida() -> str:
    beside = Path(sys.executable).parent / "nahida"
    return str(beside) if beside.exists() else "nahida"


def _batch(
    workdir: Path, db: Path, name: str, text: str, repos: list[Path], *, ok: tuple[int, ...] = (0,)
) -> dict[str, Any]:
    """Run job ``text`` over ``repos`` with ``nahida batch --local``; its JSON report.

    ``ok``: the exit codes accepted (1: a session ended other than ``completed``).
    """
    job = workdir / f"{name}.yaml"
    job.write_text(text)
    report = workdir / f"{name}-report.json"
    args = [_nahida(), "batch", str(job), "--local", "--db", str(db), "--report", str(report)]
    for repo in repos:
        args += ["--repo", str(repo)]
    done = subprocess.run(args, cwd=workdir, env=_env(db), capture_output=True, text=True)
    if done.returncode not in ok:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return dict(json.loads(report.read_text()))


def _git_repo(path: Path) -> Path:
    """A git repository with one commit (team members work in git worktrees)."""
    (path / "src").mkdir(parents=True)
    (path / "README.md").write_text("# gamma\n")
    (path / "src" / "app.py").write_text("VALUE = 1\n")
    git = ["git", "-c", "user.email=demo@example.invalid", "-c", "user.name=demo"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "-C", str(path), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(path), "commit", "-qm", "init"], check=True)
    return path


def demo_ledger(workdir: Path) -> Demo:
    """A SQLite ledger: a fan-out batch of two sessions, a recorded (queued) child
    session under the first, a parent that parked on two subagents, a team, a schedule."""
    repos = []
    for name in ("alpha", "beta"):
        repo = workdir / name
        repo.mkdir(parents=True)
        (repo / "README.md").write_text(f"# {name}\n")
        repos.append(repo)
    db = workdir / "ledger.sqlite3"
    data = _batch(workdir, db, "fanout", FANOUT_JOB, repos)
    first = data["sessions"][0]
    child_id = _child_session(db, first["session_id"], str(repos[0]))
    parent = _batch(workdir, db, "delegate", DELEGATE_JOB, repos[:1])["sessions"][0]
    # A team's members race for its tasks: the lead may end other than completed
    # (exit 1), which the console shows like any other state.
    team = _batch(
        workdir, db, "team", TEAM_JOB.read_text(), [_git_repo(workdir / "gamma")], ok=(0, 1)
    )
    schedule = "nightly-survey"
    subprocess.run(
        [_nahida(), "schedule", "add", schedule, "--job", str(workdir / "fanout.yaml"),
         "--repo", str(repos[0]), "--cron", "0 3 * * *", "--local", "--db", str(db)],
        cwd=workdir, env=_env(db), check=True, capture_output=True,
    )  # fmt: skip
    return Demo(
        db,
        data["batch_id"],
        first["session_id"],
        first["run_id"],
        child_id,
        parent_session_id=parent["session_id"],
        parent_run_id=parent["run_id"],
        schedule=schedule,
        team_id=team["sessions"][0]["session_id"],  # a team is named by its lead
    )


def _child_session(db: Path, parent_id: str, workspace: str) -> str:
    """Record a child session (``parent_id`` set, as subagents do), not dispatched."""
    from nahida_workers.ledger.sql import SqlLedger, make_engine
    from nahida_workers.ports import SystemClock
    from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
    from nahida_workers.testing import scripted_spec

    class _Unpublished:
        def publish_session(
            self, session_id: str, *, task_id: str, priority: int | None = None
        ) -> None:
            """The child is only recorded; nothing runs it in the demo."""

    ledger = SqlLedger(engine=make_engine(f"sqlite:///{db}"))
    dispatcher = Dispatcher(ledger, _Unpublished(), SystemClock())
    spec = scripted_spec([{"text": "child answer"}], prompt="a subagent's task")
    child, _ = dispatcher.submit(spec, workspace=workspace, parent_id=parent_id)
    return child.session_id


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(db: Path, workdir: Path) -> Iterator[str]:
    """``nahida serve`` on ``db``; yields its base URL."""
    port = free_port()
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [_nahida(), "serve", "--port", str(port)],
        cwd=workdir,
        env=_env(db),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((workdir / "serve.log").read_text()) from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def chromium(workdir: Path) -> Iterator[Any]:
    """A headless Chromium driven by selenium (Debian's chromium and chromium-driver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-', dir=workdir)}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def pages(demo: Demo) -> dict[str, str]:
    """Screenshot name -> path of each console page (docs/console.md shows them)."""
    return {
        "dashboard": "/",
        "batches": "/batches",
        "batch": f"/batches/{demo.batch_id}",
        "sessions": "/sessions",
        "session": f"/sessions/{demo.parent_session_id}",
        "run": f"/runs/{demo.run_id}",
        "run-waits": f"/runs/{demo.parent_run_id}",
        "schedules": "/schedules",
        "schedule": f"/schedules/{demo.schedule}",
        "teams": "/teams",
        "team": f"/teams/{demo.team_id}",
    }


def _full_page(driver: Any) -> None:
    """Wait for the live stream, then size the window to the page (capped) for the shot."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 5).until(
        lambda d: d.execute_script(
            "const s = document.getElementById('live-status');return !s || s.textContent === 'live'"
        )
    )
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, max(700, min(int(height) + 40, 2400)))


def missing_prerequisites() -> list[str]:
    """What this script needs and does not find, each with how to install it."""
    missing = []
    try:
        import selenium.webdriver  # noqa: F401
    except ImportError:
        missing.append(
            "selenium is not installed: .venv/bin/pip install -e '.[browser]' "
            "(the browser extra; .[dev] includes it)"
        )
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            missing.append(
                f"{path} not found: apt-get install {package} "
                f"(or set NAHIDA_{'CHROMIUM' if package == 'chromium' else 'CHROMEDRIVER'})"
            )
    return missing


def main(argv: list[str] | None = None) -> int:
    """Build the demo, serve it, save one PNG per page in ``--out``.

    Returns 2, having done nothing, when a prerequisite is missing.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "console")
    args = parser.parse_args(argv)
    missing = missing_prerequisites()
    if missing:
        for line in missing:
            print(f"web_screenshots: {line}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nahida-web-") as tmp:
        workdir = Path(tmp)
        demo = demo_ledger(workdir)
        with serving(demo.db, workdir) as url, chromium(workdir) as driver:
            for name, path in pages(demo).items():
                driver.get(url + path)
                target = args.out / f"{name}.png"
                _full_page(driver)
                driver.save_screenshot(str(target))
                print(f"{target}  <- {url}{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
