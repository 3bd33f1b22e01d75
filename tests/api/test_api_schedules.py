"""``/v1/schedules`` on a real ``nahida serve`` (issue 25 item 2): what ``nahida schedule`` does.

add, list, show, pause, resume, trigger, remove, apply; a removed schedule's
fires stay reachable (``/v1/removed-schedules``); every bad input is a 4xx with the
one error shape ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import Fleet, make_repo
from tests.api.conftest import Server, start_server

pytestmark = pytest.mark.slow

JOB: dict[str, Any] = {
    "name": "nightly-survey",
    "prompt": "list the files",
    "tools": ["Glob"],
    "provider": {"kind": "scripted", "script": [{"text": "Nothing to do."}]},
}


def _body(repo: Path, **fields: Any) -> dict[str, Any]:
    return {"name": "nightly", "job": JOB, "repos": [str(repo)], "every": "1h", **fields}


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    return str(body["error"]["message"])


def test_add_list_show_pause_resume_trigger_remove(
    server: Server, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    with server.client() as http:
        created = http.post("/v1/schedules", json=_body(repo, cron="0 3 * * *", every=None))
        assert created.status_code == 201, created.text
        doc = created.json()
        sid = doc["schedule_id"]
        assert (doc["name"], doc["state"], doc["fires"]) == ("nightly", "active", [])
        assert doc["trigger"].startswith("cron 0 3 * * *") and doc["next_fire"]
        assert doc["definition"]["repos"] == [str(repo.resolve())]
        taken = http.post("/v1/schedules", json=_body(repo))
        assert "exists" in _error(taken, 409, "schedule_exists")

        listed = http.get("/v1/schedules").json()["schedules"]
        assert [(s["name"], s["schedule_id"]) for s in listed] == [("nightly", sid)]
        by_prefix = http.get(f"/v1/schedules/{sid[:8]}")
        assert by_prefix.status_code == 200 and by_prefix.json()["name"] == "nightly"

        paused = http.post("/v1/schedules/nightly/pause")
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
        assert paused.json()["next_fire"] is None
        resumed = http.post("/v1/schedules/nightly/resume")
        assert resumed.json()["state"] == "active" and resumed.json()["next_fire"]

        fired = http.post("/v1/schedules/nightly/trigger")
        assert fired.status_code == 202, fired.text
        fire = fired.json()["fire"]
        assert fire["kind"] == "manual" and fire["outcome"] == "dispatched", fired.json()
        assert fired.json()["delivered"] is True and fired.json()["undelivered_sessions"] == 0
        batch_id = fire["batch_id"]
        assert [s.workspace for s in pg.sessions(batch_id=batch_id)] == [str(repo.resolve())]
        shown = http.get("/v1/schedules/nightly", params={"fires": 5}).json()
        assert [(f["batch_id"], f["usage"]["turns"]) for f in shown["fires"]] == [(batch_id, 0)]
        assert http.get(f"/v1/batches/{batch_id}").status_code == 200

        removed = http.delete("/v1/schedules/nightly")
        assert removed.status_code == 200 and removed.json()["state"] == "removed"
        assert "removed-schedules" in _error(http.get("/v1/schedules/nightly"), 404, "not_found")
        _error(http.get("/v1/removed-schedules/nosuch"), 404, "not_found")
        kept = http.get("/v1/removed-schedules/nightly")
        assert kept.status_code == 200, kept.text
        assert kept.json()["state"] == "removed" and kept.json()["removed_at"]
        assert [f["batch_id"] for f in kept.json()["fires"]] == [batch_id]
        assert http.get("/v1/schedules").json() == {"schedules": []}
        gone = http.get("/v1/removed-schedules").json()["schedules"]
        assert [s["schedule_id"] for s in gone] == [sid]
        for action in ("pause", "resume", "trigger"):
            _error(http.post(f"/v1/schedules/nightly/{action}"), 404, "not_found")
        _error(http.delete("/v1/schedules/nightly"), 404, "not_found")


def test_apply_is_idempotent_and_checks_every_entry_first(
    server: Server, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    one, two = _body(repo, name="a"), _body(repo, name="b", every="2h")
    with server.client() as http:
        first = http.post("/v1/schedules/apply", json={"schedules": [one, two]})
        assert first.status_code == 200, first.text
        assert [(r["name"], r["change"]) for r in first.json()["results"]] == [
            ("a", "created"),
            ("b", "created"),
        ]
        again = http.post("/v1/schedules/apply", json={"schedules": [one, two]})
        assert [r["change"] for r in again.json()["results"]] == ["unchanged", "unchanged"]
        edited = http.post("/v1/schedules/apply", json={"schedules": [{**one, "every": "3h"}]})
        assert [r["change"] for r in edited.json()["results"]] == ["updated"]
        bad = {**two, "name": "c", "cron": "not a cron", "every": None}
        refused = http.post("/v1/schedules/apply", json={"schedules": [_body(repo, name="d"), bad]})
        _error(refused, 400, "invalid_request")
        names = [s["name"] for s in http.get("/v1/schedules").json()["schedules"]]
        assert names == ["a", "b"]  # "d" was not stored: "c" was refused first
        twice = http.post("/v1/schedules/apply", json={"schedules": [one, one]})
        assert "unique" in _error(twice, 400, "invalid_request")


def test_bad_schedules_are_4xx_with_the_error_shape(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    root = tmp_path / "allowed"
    repo = make_repo(root / "repo")
    outside = make_repo(tmp_path / "outside")
    server = start_server(fleet, tmp_path, NAHIDA_API_WORKSPACE_ROOTS=str(root))
    try:
        with server.client() as http:
            post = lambda **f: http.post("/v1/schedules", json=_body(repo, **f))  # noqa: E731
            assert "cron" in _error(post(cron="61 * * * *", every=None), 400, "invalid_request")
            _error(post(every=None), 400, "invalid_request")  # neither cron nor every
            _error(post(cron="0 3 * * *"), 400, "invalid_request")  # both
            _error(post(every="1s"), 400, "invalid_request")  # faster than beat ticks
            _error(post(timezone="Mars/Olympus"), 400, "invalid_request")
            _error(post(name="no spaces"), 422, "invalid_input")
            _error(post(repos=["relative/path"]), 422, "invalid_input")
            _error(post(repos=[str(outside)]), 403, "forbidden")
            _error(post(repos=[str(root / "missing")]), 404, "not_found")
            _error(post(job={**JOB, "tools": ["NoSuchTool"]}), 422, "invalid_input")
            _error(post(job={**JOB, "trust_workspace": True}), 400, "invalid_request")
            _error(post(overlap="sometimes"), 422, "invalid_input")
            _error(post(surprise=1), 422, "invalid_input")
            raw = http.post(
                "/v1/schedules", content=b"{", headers={"content-type": "application/json"}
            )
            _error(raw, 400, "malformed_json")
            _error(http.get("/v1/schedules", params={"removed": "1"}), 422, "invalid_input")
            _error(http.get("/v1/schedules/x", params={"fires": 0}), 422, "invalid_input")
            _error(http.get("/v1/schedules/nosuch"), 404, "not_found")
            _error(http.post("/v1/schedules/nosuch/trigger"), 404, "not_found")
            assert http.get("/v1/schedules").json() == {"schedules": []}
            schema = http.get("/openapi.json").json()
            for path in (
                "/v1/schedules",
                "/v1/schedules/apply",
                "/v1/schedules/{name}",
                "/v1/schedules/{name}/pause",
                "/v1/schedules/{name}/resume",
                "/v1/schedules/{name}/trigger",
                "/v1/removed-schedules",
                "/v1/removed-schedules/{name}",
            ):
                assert path in schema["paths"], path
            create = schema["paths"]["/v1/schedules"]["post"]
            assert {"201", "400", "403", "404", "409", "422"} <= set(create["responses"])
            assert schema["components"]["schemas"]["ScheduleIn"]["examples"]
    finally:
        server.stop()
