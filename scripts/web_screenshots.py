"""Screenshots of the web view in headless Chromium, one per page (kept out of git).

    .venv/bin/pip install -e '.[browser]'          # selenium (`.[dev]` includes it)
    apt-get install chromium chromium-driver       # the browser and its driver (Debian)
    .venv/bin/python scripts/web_screenshots.py [--out screenshots]

Builds a demo ledger in a scratch directory (a local batch of two fan-out
sessions: four 300 ms Sleep calls in parallel, then an answer; and a child
session under the first, as a subagent would make), starts ``nahida serve``
on it, and saves ``index.png``, ``batch.png``, ``session.png`` and
``run.png`` (the timeline) with Debian's ``chromium`` and ``chromium-driver``
through selenium.  The browser tests (``tests/browser``) use the same pieces.

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


@dataclass
class Demo:
    """The ids of the demo ledger."""

    db: Path
    batch_id: str
    session_id: str
    run_id: str
    child_id: str


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


def demo_ledger(workdir: Path) -> Demo:
    """A SQLite ledger with a fan-out batch of two sessions and one child session."""
    repos = []
    for name in ("alpha", "beta"):
        repo = workdir / name
        repo.mkdir(parents=True)
        (repo / "README.md").write_text(f"# {name}\n")
        repos.append(repo)
    job = workdir / "fanout.yaml"
    job.write_text(FANOUT_JOB)
    db = workdir / "ledger.sqlite3"
    report = workdir / "report.json"
    args = [_nahida(), "batch", str(job), "--local", "--db", str(db), "--report", str(report)]
    for repo in repos:
        args += ["--repo", str(repo)]
    subprocess.run(args, cwd=workdir, env=_env(db), check=True, capture_output=True)
    data = json.loads(report.read_text())
    first = data["sessions"][0]
    child_id = _child_session(db, first["session_id"], str(repos[0]))
    return Demo(db, data["batch_id"], first["session_id"], first["run_id"], child_id)


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
    """Screenshot name -> path of each page."""
    return {
        "index": "/",
        "batch": f"/batches/{demo.batch_id}",
        "session": f"/sessions/{demo.session_id}",
        "run": f"/runs/{demo.run_id}",
    }


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
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
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
                driver.save_screenshot(str(target))
                print(f"{target}  <- {url}{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
