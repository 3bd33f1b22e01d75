"""``nahida serve`` as a process (issue 25 item 4): URL and ready line, a line per request, SIGTERM.

A real server process on the real PostgreSQL and Redis: it prints its URL
and ``ready`` on stderr, logs each request in one line (one JSON object with
``NAHIDA_LOG_FORMAT=json``) and, on SIGTERM, stops and exits 0.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing.fleet import Fleet
from tests.api.conftest import start_server

pytestmark = pytest.mark.slow


def _stop_with_sigterm(proc: object) -> int:
    proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
    return int(proc.wait(timeout=20))  # type: ignore[attr-defined]


def test_text_lines_ready_request_and_a_clean_sigterm(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    server = start_server(fleet, tmp_path)
    try:
        with server.client() as client:
            assert client.get("/v1/batches").status_code == 200
            assert client.get("/v1/sessions/nosuchsession").status_code == 404
    finally:
        code = _stop_with_sigterm(server.proc)
    text = server.log.read_text()
    assert code == 0, text
    assert f"nahida serve: {server.url} (API {server.url}/v1" in text
    assert f"nahida serve: ready at {server.url}" in text
    assert "GET /v1/batches 200 " in text
    assert "GET /v1/sessions/nosuchsession 404 " in text
    assert "SIGTERM received, stopping" in text and "nahida serve: stopped (SIGTERM)" in text
    assert "Traceback" not in text
    lines = text.splitlines()
    ready = next(i for i, line in enumerate(lines) if "ready at" in line)
    first_request = next(i for i, line in enumerate(lines) if "GET /v1/batches" in line)
    assert ready < first_request


def test_json_lines_with_nahida_log_format_json(
    fleet: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    server = start_server(fleet, tmp_path, NAHIDA_LOG_FORMAT="json")
    try:
        with server.client() as client:
            assert client.get("/v1/batches?limit=1").status_code == 200
    finally:
        code = _stop_with_sigterm(server.proc)
    assert code == 0, server.log.read_text()
    records = [json.loads(line) for line in server.log.read_text().splitlines() if line.strip()]
    messages = [r["message"] for r in records]
    assert any(m.startswith("nahida serve: ready at http://127.0.0.1:") for m in messages)
    requests = [r["request"] for r in records if "request" in r]
    batches = [r for r in requests if r["path"] == "/v1/batches"]
    assert len(batches) == 1, requests
    assert batches[0]["method"] == "GET" and batches[0]["status"] == 200
    assert batches[0]["ms"] >= 0 and batches[0]["client"] == "127.0.0.1"
    assert "limit" not in json.dumps(batches[0])  # the query string is never logged
    assert messages[-1] == "nahida serve: stopped (SIGTERM)"
