"""scripts/web_screenshots.py says which prerequisite is missing, and how to install it.

It needs selenium (the ``browser`` extra) and Debian's chromium and
chromium-driver; without one it exits 2 with one line per missing piece,
before it builds anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "web_screenshots.py"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "shots")],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_selenium_it_names_the_browser_extra(tmp_path: Path) -> None:
    # A package named selenium that cannot be imported shadows the installed one.
    shim = tmp_path / "shim" / "selenium"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('no selenium here')\n")
    done = _run(tmp_path, PYTHONPATH=str(shim.parent))
    assert done.returncode == 2, done.stderr
    assert "selenium is not installed" in done.stderr
    assert "pip install -e '.[browser]'" in done.stderr
    assert not (tmp_path / "shots").exists() or not any((tmp_path / "shots").iterdir())


def test_without_chromium_it_names_the_debian_packages(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    done = _run(tmp_path, NAHIDA_CHROMIUM=missing, NAHIDA_CHROMEDRIVER=missing)
    assert done.returncode == 2, done.stderr
    assert "apt-get install chromium " in done.stderr
    assert "apt-get install chromium-driver" in done.stderr
    assert "Traceback" not in done.stderr
