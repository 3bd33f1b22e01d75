"""Console actions behind a token: the cookie alone cannot act; with the page's token it can."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from nahida_workers.api.services import Services
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import make_engine
from nahida_workers.settings import Settings
from nahida_workers.testing import scripted_spec

TOKEN = "s3cret-token"


def test_cookie_login_then_actions_need_the_csrf_token(tmp_path: Path) -> None:
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
        api_token=TOKEN,
    )
    queue = ListTaskQueue()
    fleet = build_fleet(settings, queue)
    session, _ = fleet.dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace="/tmp")
    sid = session.session_id
    client = TestClient(create_app(Services(fleet=fleet, redis=None)))
    assert client.get("/").status_code == 401  # the console is behind the token
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert client.post("/login", content=f"token={TOKEN}", headers=form).status_code == 200
    page = client.get(f"/sessions/{sid}")
    assert page.status_code == 200  # the cookie reads
    found = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
    assert found is not None
    steer = f"/console/actions/sessions/{sid}/steer"
    refused = client.post(steer, json={"text": "go left"})  # a forged form carries the cookie only
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    foreign = client.post(
        steer,
        json={"text": "go left"},
        headers={"X-CSRF-Token": found.group(1), "Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]["message"]
    done = client.post(steer, json={"text": "go left"}, headers={"X-CSRF-Token": found.group(1)})
    assert done.status_code == 200 and done.json()["ok"] is True
    assert [m.text for m in fleet.ledger.inbox(sid)] == ["go left"]
    bad = client.post(
        steer, json={"text": "x", "extra": 1}, headers={"X-CSRF-Token": found.group(1)}
    )
    assert bad.status_code == 422  # the API's error shape for a body it does not know
    cancel = f"/console/actions/sessions/{sid}/cancel"
    assert client.post(cancel, headers={"X-CSRF-Token": found.group(1)}).status_code == 200
    # queued, no worker holds it: the cancel sealed it at once (issue 21 item 2)
    (run,) = fleet.ledger.runs_of(sid)
    assert run.terminal_state is not None and run.terminal_state.value == "cancelled"
    missing = client.post(
        "/console/actions/schedules/nope/pause", headers={"X-CSRF-Token": found.group(1)}
    )
    assert missing.status_code == 404 and "no schedule nope" in missing.json()["error"]["message"]
