"""The web view in a real headless Chromium (Debian's chromium + chromium-driver, selenium).

The pages load, link to each other, show a session's child, and the
timeline of a fan-out run draws its four parallel calls as overlapping bars.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nahida_workers.testing.fleet import ROOT
from tests.conftest import CI

pytestmark = pytest.mark.slow


def _shots() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "web_screenshots", ROOT / "scripts" / "web_screenshots.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["web_screenshots"] = module
    spec.loader.exec_module(module)
    return module


shots = _shots()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, Any]]:
    """(demo ids, base URL, selenium driver) over one demo ledger."""
    if not (Path(shots.CHROMIUM).exists() and Path(shots.CHROMEDRIVER).exists()):
        message = "chromium and chromium-driver are not installed (.ci/run installs them)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    assert shutil.which("git")
    workdir = tmp_path_factory.mktemp("web")
    demo = shots.demo_ledger(workdir)
    with shots.serving(demo.db, workdir) as url, shots.chromium(workdir) as driver:
        yield demo, url, driver


def test_pages_load_and_link(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(url + "/")
    assert demo.batch_id in driver.page_source
    driver.find_element(By.LINK_TEXT, demo.batch_id).click()
    rows = driver.find_elements(By.CSS_SELECTOR, "#sessions tr")
    assert len(rows) == 3  # header + two sessions
    assert "completed" in driver.find_element(By.ID, "sessions").text
    driver.find_element(By.CSS_SELECTOR, f'a[href="/sessions/{demo.session_id}"]').click()
    assert driver.find_element(By.CSS_SELECTOR, "h1").text.endswith(demo.session_id)
    children = driver.find_element(By.ID, "children").text
    assert demo.child_id in children and "queued" in children
    driver.find_element(By.CSS_SELECTOR, f'a[href="/runs/{demo.run_id}"]').click()
    assert driver.find_element(By.CSS_SELECTOR, "#timeline svg")


def test_fan_out_timeline_shows_overlapping_bars_with_receipts(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(f"{url}/runs/{demo.run_id}")
    bars = driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.tool")
    assert len(bars) == 4
    spans = []
    for bar in bars:
        rect = bar.find_element(By.TAG_NAME, "rect")
        box = rect.rect  # as the browser laid it out, in CSS pixels
        spans.append((box["x"], box["x"] + box["width"], box["y"]))
        assert "local" in bar.get_attribute("class")
        title = rect.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        assert "receipt ok" in title and "SleepLocal" in title
    overlapping = [
        (a, b) for i, a in enumerate(spans) for b in spans[i + 1 :] if a[0] < b[1] and b[0] < a[1]
    ]
    assert len(overlapping) == 6, spans  # four parallel calls: every pair overlaps
    assert len({y for _x0, _x1, y in spans}) == 4, "overlapping bars sit on separate lanes"
    provider = driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.provider")
    assert len(provider) == 2
