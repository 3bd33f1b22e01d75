"""``POST /v1/sessions/{id}/ask`` over a real ``nahida serve``, PostgreSQL, Redis and a worker.

Issue 23 item 2: the answer comes from the session's transcript, tool calls
are refused, the session's ledger rows are byte-identical before and after
(read straight from PostgreSQL), the exchange is an artifact; bad input gets
typed errors (404, 422, 400) and a failing provider a 502.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import Fleet, make_repo, wait_done, wait_for
from tests.api.conftest import Server

pytestmark = pytest.mark.slow

SCRIPT: dict[str, Any] = {
    "turns": [
        {
            "text": "looking",
            "tool_calls": [{"id": "r1", "name": "Read", "arguments": {"path": "README.md"}}],
        },
        {"text": "The README says Demo."},
    ],
    "ask": [
        {
            "text": "checking again",
            "tool_calls": [{"id": "a1", "name": "Read", "arguments": {"path": "README.md"}}],
        },
        {"text": "It read README.md, which says Demo."},
    ],
}


def _job(script: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "ask-demo",
        "prompt": "read the README",
        "tools": ["Read"],
        "provider": {"kind": "scripted", "script": script},
    }


def settle(fleet: Fleet, pg: SqlLedger, session_id: str) -> None:
    """Wait until the worker let go of the session, then stop it: no write of its can follow."""

    def closed() -> bool:
        session = pg.get_session(session_id)
        return session is not None and session.open_epoch is None

    wait_for(closed, timeout=30, what="the worker to close its ownership")
    for worker in fleet.workers:
        worker.stop()


def ledger_rows(pg: SqlLedger, session_id: str) -> bytes:
    """Every row of the session's transcript and task, as PostgreSQL returns them."""
    queries = {
        "sessions": "SELECT * FROM sessions WHERE session_id = :s",
        "runs": "SELECT * FROM agent_runs WHERE session_id = :s ORDER BY run_id",
        "events": "SELECT e.* FROM agent_run_events e JOIN agent_runs r USING (run_id) "
        "WHERE r.session_id = :s ORDER BY e.event_id",
        "receipts": "SELECT x.* FROM agent_execution_receipts x JOIN agent_runs r USING (run_id) "
        "WHERE r.session_id = :s ORDER BY x.receipt_id",
        "inbox": "SELECT * FROM session_inbox WHERE session_id = :s ORDER BY message_id",
        "outbox": "SELECT * FROM dispatch_outbox WHERE session_id = :s ORDER BY outbox_id",
    }
    doc = {}
    with pg.engine.connect() as conn:
        for name, sql in queries.items():
            rows = conn.execute(text(sql), {"s": session_id}).mappings().all()
            doc[name] = [{k: str(v) for k, v in row.items()} for row in rows]
    return json.dumps(doc, sort_keys=True).encode()


def test_ask_answers_refuses_tools_and_changes_nothing(
    server: Server, fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    fleet.start_worker(queues="sessions", name="s1")
    with server.client() as http:
        created = http.post("/v1/sessions", json={"job": _job(SCRIPT), "workspace": str(repo)})
        assert created.status_code == 201, created.text
        sid = created.json()["session"]["session_id"]
        wait_done(pg, sid, timeout=60)
        settle(fleet, pg, sid)
        before = ledger_rows(pg, sid)
        asked = http.post(f"/v1/sessions/{sid[:10]}/ask", json={"question": "What did you read?"})
        assert asked.status_code == 200, asked.text
        body = asked.json()
        assert body["answer"] == "It read README.md, which says Demo."
        assert body["refused"] == [{"turn": 0, "call_id": "a1", "name": "Read"}]
        assert body["stop"] == "answered" and body["turns"] == 2
        assert body["transcript_messages"] >= 4 and body["session_id"] == sid
        assert ledger_rows(pg, sid) == before  # byte-identical: nothing entered the session
        record = json.loads(pg.get_artifact(body["record"]) or b"{}")
        assert record["kind"] == "side_conversation" and record["answer"] == body["answer"]
        assert len(pg.runs_of(sid)) == 1  # no run started, nothing dispatched


def test_ask_bad_input_is_typed(
    server: Server, fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    no_ask = {"turns": SCRIPT["turns"]}
    failing = {"turns": SCRIPT["turns"], "ask": [{"error": {"status": 500, "message": "boom"}}]}
    with server.client() as http:
        sids = []
        for script in (no_ask, failing):
            made = http.post("/v1/sessions", json={"job": _job(script), "workspace": str(repo)})
            assert made.status_code == 201, made.text
            sids.append(made.json()["session"]["session_id"])
        cases = [
            ("/v1/sessions/nosuchsession/ask", {"question": "q"}, 404, "not_found"),
            (f"/v1/sessions/{sids[0]}/ask", {"question": "   "}, 422, "invalid_input"),
            (f"/v1/sessions/{sids[0]}/ask", {"question": ""}, 422, "invalid_input"),
            (f"/v1/sessions/{sids[0]}/ask", {"question": "q", "x": 1}, 422, "invalid_input"),
            (f"/v1/sessions/{sids[0]}/ask", {"question": "x" * 20000}, 422, "invalid_input"),
            (f"/v1/sessions/{sids[0]}/ask", {"question": "q"}, 400, "invalid_request"),
            (f"/v1/sessions/{sids[1]}/ask", {"question": "q"}, 502, "provider_error"),
        ]
        for path, payload, status, code in cases:
            answer = http.post(path, json=payload)
            assert answer.status_code == status, (path, payload, answer.text)
            assert answer.json()["error"]["code"] == code, answer.text
        assert "boom" not in http.post(f"/v1/sessions/{sids[1]}/ask", json={"question": "q"}).text
        schema = http.get("/openapi.json").json()
        op = schema["paths"]["/v1/sessions/{session_id}/ask"]["post"]
        assert op["operationId"] == "askSession"
        assert {"200", "400", "404", "422", "502"} <= set(op["responses"])
