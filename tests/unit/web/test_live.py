"""The live stream sends, at once, what changed since the page was rendered, then each change."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nahida_workers.api.services import Services
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import make_engine
from nahida_workers.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    from nahida_workers.api.app import create_app
    from nahida_workers.runtime.wiring import build_fleet
    from nahida_workers.testing.doubles import ListTaskQueue

    db = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    upgrade(make_engine(db))
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=db,
        broker_url="memory://localhost/",
        redis_url="fakeredis://",
        api_max_follow_s=3,
    )
    fleet = build_fleet(settings, ListTaskQueue())
    return TestClient(create_app(Services(fleet=fleet, redis=None)))


def _events(client: TestClient, url: str) -> list[dict[str, str]]:
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    return [json.loads(d) for d in re.findall(r"^data: (.+)$", text, flags=re.M) if d != "{}"]


def test_stream_sends_what_changed_since_the_page(client: TestClient) -> None:
    page = client.get("/sessions").text
    live = re.search(r'data-live="([^"]+)"', page)
    assert live is not None
    url = live.group(1).replace("&amp;", "&")
    assert "v=" in url
    # unchanged since the render: nothing at once, nothing later (the stream ends at 3 s)
    assert _events(client, url) == []
    # a stale digest: every region at once
    stale = re.sub(r"v=[0-9a-f]+", "v=0", url)
    sent = _events(client, stale)
    assert [e["region"] for e in sent] == ["rows"] and "no session matches" in sent[0]["html"]


def test_unknown_view_and_bad_key_are_404(client: TestClient) -> None:
    assert client.get("/console/live/nope").status_code == 404
    assert client.get("/console/live/session?key=missing").status_code == 404


def test_console_streams_count_as_streams() -> None:
    from nahida_workers.api.app import _is_stream

    assert _is_stream("/console/live/dashboard")  # bounded by NAHIDA_API_MAX_FOLLOWERS
    assert _is_stream("/v1/sessions/s/events")
    assert not _is_stream("/sessions/s")


def test_pages_forbid_framing_and_foreign_scripts(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert page.headers["cache-control"] == "no-store"
