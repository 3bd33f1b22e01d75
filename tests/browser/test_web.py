"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, selenium).

One demo ledger and one ``nahida serve`` for the module (scripts/web_screenshots.py
builds both): every page shows its key content, a live update arrives
without a reload (a marker set on ``window`` survives it), actions work
after a confirmation and a refused action says why.
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

WAIT_S = 10


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


def _wait(driver: Any, condition: Any) -> Any:
    """``condition`` true within WAIT_S; an element a live update replaced is looked up again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))
    return wait.until(condition)


def _open_live(driver: Any, url: str) -> None:
    """Load ``url``, wait until its event stream is open, and mark the page (no reload)."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    _wait(driver, lambda d: d.find_element(By.ID, "live-status").text == "live")
    driver.execute_script("window.__notReloaded = true")


def _not_reloaded(driver: Any) -> bool:
    return bool(driver.execute_script("return window.__notReloaded === true"))


def _act(driver: Any, button_id: str) -> str:
    """Click an action's button, confirm in the dialog, return what the page then says."""
    from selenium.webdriver.common.by import By

    driver.execute_script("document.getElementById('flash').hidden = true")
    driver.find_element(By.ID, button_id).click()
    dialog = driver.find_element(By.ID, "confirm")
    _wait(driver, lambda _d: dialog.get_attribute("open") is not None)
    assert driver.find_element(By.ID, "confirm-text").text  # it asks first
    driver.find_element(By.ID, "confirm-ok").click()
    flash = driver.find_element(By.ID, "flash")
    _wait(driver, lambda _d: flash.is_displayed() and flash.text)
    return str(flash.text)


def _record_session(demo: Any, parent_id: str | None = None) -> str:
    """Record a queued session in the demo ledger from outside the server."""
    return str(shots._child_session(demo.db, parent_id or demo.session_id, "/tmp"))


def test_dashboard_shows_states_hour_queues_workers_and_due_schedules(
    site: tuple[Any, str, Any],
) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(url + "/")
    cards = driver.find_element(By.ID, "by-state").text
    for state in ("queued", "running", "waiting", "done"):
        assert state in cards
    assert "runs ended" in driver.find_element(By.ID, "last-hour").text
    # the demo's broker is another process's memory: "unknown", never a zero
    assert driver.find_element(By.ID, "queues").text.count("unknown") >= 2
    assert "unknown" in driver.find_element(By.ID, "workers").text
    assert demo.schedule in driver.find_element(By.ID, "due").text


def test_lists_filter_and_page(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(url + "/batches")
    batches = driver.find_element(By.ID, "batches").text
    assert demo.batch_id in batches and "fan-out demo" in batches and "delegate demo" in batches
    assert "page 1 of 1" in driver.find_element(By.CSS_SELECTOR, ".pager").text
    driver.get(f"{url}/sessions?state=completed")
    rows = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
    assert rows and all("completed" in r.text for r in rows)
    assert demo.child_id[:12] not in driver.find_element(By.ID, "sessions").text
    driver.get(f"{url}/sessions?parent={demo.session_id}")
    assert demo.child_id[:12] in driver.find_element(By.ID, "sessions").text
    driver.get(f"{url}/sessions?job=delegate+demo")
    # the parent and its two children: children share their parent's batch
    assert len(driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 3
    driver.get(f"{url}/batches/{demo.batch_id}")
    assert "completed" in driver.find_element(By.ID, "summary").text
    driver.get(url + "/schedules")
    assert demo.schedule in driver.find_element(By.ID, "schedules").text
    driver.get(url + "/teams")
    teams = driver.find_element(By.ID, "teams").text
    assert demo.team_id[:12] in teams


def test_team_page_shows_members_and_tasks(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(f"{url}/teams/{demo.team_id}")
    members = driver.find_elements(By.CSS_SELECTOR, "#members tbody tr")
    assert len(members) == 4 and all("completed" in m.text for m in members)  # lead + 3
    tasks = driver.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
    assert len(tasks) == 6 and all("done" in t.text for t in tasks)


def test_session_page_shows_runs_tree_and_inbox(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(f"{url}/sessions/{demo.parent_session_id}")
    assert "completed" in driver.find_element(By.ID, "summary").text
    assert demo.parent_run_id in driver.find_element(By.ID, "runs").text
    tree = driver.find_elements(By.CSS_SELECTOR, "#tree ul.tree > li > ul > li")
    assert len(tree) == 2 and all("completed" in node.text for node in tree)
    inbox = driver.find_elements(By.CSS_SELECTOR, "#inbox tbody tr")
    assert len(inbox) == 2  # each child's completion, posted to its parent's inbox
    assert all("acknowledged" in r.text and "it's over" in r.text for r in inbox)


def test_run_page_reads_as_a_conversation(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(f"{url}/runs/{demo.run_id}")
    talk = driver.find_element(By.ID, "conversation")
    assert "Wait on four things at once" in talk.find_element(By.CSS_SELECTOR, ".prompt").text
    calls = talk.find_elements(By.CSS_SELECTOR, ".call")
    assert len(calls) == 4
    assert '"ms": 300' in calls[0].text and "slept 300 ms" in calls[0].text
    assert "ok in" in calls[0].find_element(By.CSS_SELECTOR, ".receipt").text
    assert "passed every completion check" in driver.find_element(By.ID, "explanation").text
    driver.get(f"{url}/runs/{demo.parent_run_id}")
    text = driver.find_element(By.ID, "conversation").text
    assert "it's over" in text  # an apostrophe, as text
    assert "\\u0027" not in driver.page_source
    assert "parked: waiting on 2 child session(s)" in text


def test_timelines_show_parallel_calls_and_waits(site: tuple[Any, str, Any]) -> None:
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
    assert len(driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.provider")) == 2
    assert driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.wait.queue")
    # the parent: its wait on its children is a parked span, each child a lane
    driver.get(f"{url}/runs/{demo.parent_run_id}")
    parked = driver.find_element(By.CSS_SELECTOR, "#timeline g.bar.wait.parked rect")
    children = driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.child rect")
    assert len(children) == 2
    tasks = driver.find_elements(By.CSS_SELECTOR, "#timeline g.bar.tool rect")
    assert len(tasks) == 2 and all(t.rect["width"] > 20 for t in tasks)  # the wait, not 0 ms
    assert parked.rect["width"] > 20
    task_y = max(t.rect["y"] for t in tasks)
    assert all(c.rect["y"] > task_y for c in children), "child lanes sit under the Task calls"


def test_live_update_arrives_without_reload(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    _open_live(driver, url + "/")

    def queued() -> int:
        card = driver.find_element(By.CSS_SELECTOR, '#by-state a[href="/sessions?state=queued"]')
        return int(card.text.split()[0])

    seen: list[int] = []
    _wait(driver, lambda _d: seen.append(queued()) or True)
    before = seen[-1]
    _record_session(demo)
    _wait(driver, lambda _d: queued() == before + 1)
    assert _not_reloaded(driver)


def test_cancel_after_confirmation_and_the_page_follows(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    target = _record_session(demo)
    _open_live(driver, f"{url}/sessions/{target}")
    assert "queued" in driver.find_element(By.ID, "summary").text
    said = _act(driver, "cancel")
    # no worker holds it (none runs in the demo): the cancel seals it at once
    # (issue 21 item 2), and the page shows it live
    assert "cancelled: no worker held the session" in said
    _wait(driver, lambda d: "cancelled" in d.find_element(By.ID, "summary").text)
    assert _not_reloaded(driver)


def test_refused_actions_say_why(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    driver.get(f"{url}/sessions/{demo.session_id}")
    said = _act(driver, "cancel")
    assert f"refused: session {demo.session_id} is done; nothing to cancel" in said
    driver.find_element(By.CSS_SELECTOR, "form.action button[type=submit]").click()  # empty steer
    driver.find_element(By.ID, "confirm-ok").click()
    _wait(driver, lambda d: "write a message" in d.find_element(By.ID, "flash").text)
    status, body = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('/console/actions/sessions/{demo.session_id}/cancel', {{method: 'POST'}})"
        ".then(r => r.json().then(j => done([r.status, j.error.message])));"
    )
    assert status == 403 and "CSRF token" in body


def test_schedule_pause_resume_trigger(site: tuple[Any, str, Any]) -> None:
    from selenium.webdriver.common.by import By

    demo, url, driver = site
    _open_live(driver, f"{url}/schedules/{demo.schedule}")
    assert "paused" in _act(driver, "pause")
    _wait(driver, lambda d: "paused" in d.find_element(By.ID, "summary").text)
    assert f"refused: schedule {demo.schedule} is already paused" in _act(driver, "pause")
    assert "resumed" in _act(driver, "resume")
    said = _act(driver, "trigger")
    assert "fired: dispatched" in said
    batch = said.rsplit("batch ", 1)[1].strip()
    _wait(driver, lambda d: batch[:12] in d.find_element(By.ID, "fires").text)
    assert _not_reloaded(driver)
