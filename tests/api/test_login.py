"""``/login`` and the token on a real ``nahida serve``: only the right token becomes a cookie.

``/login?token=X`` stored X as the auth cookie unchecked (login CSRF), and a
wrong bearer token got the same answer as a missing one.  Now the token is
checked (constant time) before any cookie, over a POST form; the cookie is
HttpOnly, SameSite=Strict and -- over TLS, or behind a trusted proxy that
says https -- Secure; a wrong token is "invalid token", logged without it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nahida_workers.testing.fleet import Fleet, wait_for
from tests.api.conftest import Server, free_port
from tests.cli.helpers import nahida_script

pytestmark = pytest.mark.slow

TOKEN = "s3cret-login-token"
WRONG = "wrong-guess-4711"
FORM = {"content-type": "application/x-www-form-urlencoded"}


def _serve(fleet: Fleet, tmp_path: Path, *args: str, scheme: str = "http", **env: str) -> Server:
    """``nahida serve ARGS`` with the token set; waits for /healthz."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    proc = subprocess.Popen(
        [nahida_script(), "serve", "--port", str(port), *args],
        cwd=tmp_path,
        env={**fleet.env(), "NAHIDA_API_TOKEN": TOKEN, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(f"{scheme}://127.0.0.1:{port}", proc, log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"nahida serve exited: {log.read_text()}")
        try:
            return httpx.get(f"{server.url}/healthz", timeout=1, verify=False).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30, what="nahida serve")
    return server


@pytest.fixture
def served(fleet: Fleet, pg: object, tmp_path: Path) -> Iterator[Server]:
    server = _serve(fleet, tmp_path)
    yield server
    server.stop()


def test_a_token_in_the_url_sets_no_cookie_and_get_shows_the_form(served: Server) -> None:
    with served.client() as http:
        page = http.get(f"/login?token={TOKEN}")
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert '<form method="post" action="/login">' in page.text
        assert http.get("/").status_code == 401  # the URL logged nobody in


def test_a_wrong_token_is_refused_before_any_cookie_and_logged_without_it(served: Server) -> None:
    with served.client() as http:
        wrong = http.post("/login", content=f"token={WRONG}", headers=FORM)
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        assert "invalid token" in wrong.text
        empty = http.post("/login", content="token=", headers=FORM)
        assert empty.status_code == 400 and "set-cookie" not in empty.headers
        assert "a token is required" in empty.text and "invalid token" not in empty.text
        as_json = http.post("/login", json={"token": TOKEN})
        assert as_json.status_code == 415 and "set-cookie" not in as_json.headers
        assert http.get("/").status_code == 401
    log = served.log.read_text()
    assert "login refused from 127.0.0.1: invalid token" in log
    assert WRONG not in log


def test_the_right_token_sets_an_httponly_strict_cookie_that_opens_the_pages(
    served: Server,
) -> None:
    with served.client() as http:
        ok = http.post("/login", content=f"token={TOKEN}", headers=FORM)
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith(f"nahida_token={TOKEN};")
        parts = {p.strip().lower() for p in cookie.split(";")}
        assert {"httponly", "samesite=strict", "path=/"} <= parts
        assert "secure" not in parts  # plain HTTP, no trusted proxy
        assert http.get("/").status_code == 200  # the client kept the cookie
        assert http.get("/v1/batches").status_code == 200
    with served.client(cookies={"nahida_token": WRONG}) as http:
        refused = http.get("/v1/batches")
        assert refused.status_code == 401
        assert refused.json()["error"] == {"code": "invalid_token", "message": "invalid token"}


def test_the_api_says_invalid_token_for_a_wrong_one_and_logs_it_without_the_token(
    served: Server,
) -> None:
    with served.client() as http:
        missing = http.get("/v1/batches")
        wrong = http.get("/v1/batches", headers={"Authorization": f"Bearer {WRONG}"})
        right = http.get("/v1/batches", headers={"Authorization": f"Bearer {TOKEN}"})
    assert missing.status_code == wrong.status_code == 401 and right.status_code == 200
    assert missing.json()["error"]["code"] == "unauthorized"
    assert "invalid token" not in missing.json()["error"]["message"]
    assert wrong.json()["error"] == {"code": "invalid_token", "message": "invalid token"}
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    log = served.log.read_text()
    assert "refused GET /v1/batches from 127.0.0.1: invalid token" in log
    assert WRONG not in log and TOKEN not in log


def test_forwarded_proto_makes_the_cookie_secure_only_from_a_trusted_proxy(
    fleet: Fleet, pg: object, tmp_path: Path
) -> None:
    claims_https = {**FORM, "X-Forwarded-Proto": "https"}
    for trusted, secure in (("", False), ("127.0.0.1", True)):
        server = _serve(fleet, tmp_path, NAHIDA_API_TRUSTED_PROXIES=trusted)
        try:
            with server.client() as http:
                ok = http.post("/login", content=f"token={TOKEN}", headers=claims_https)
            parts = {p.strip().lower() for p in ok.headers["set-cookie"].split(";")}
            assert ok.status_code == 303 and ("secure" in parts) is secure, (trusted, parts)
        finally:
            server.stop()


def test_over_tls_the_cookie_is_secure(fleet: Fleet, pg: object, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = _serve(
        fleet, tmp_path, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), scheme="https"
    )
    try:
        with server.client(verify=False) as http:
            ok = http.post("/login", content=f"token={TOKEN}", headers=FORM)
        parts = {p.strip().lower() for p in ok.headers["set-cookie"].split(";")}
        assert ok.status_code == 303 and {"secure", "httponly", "samesite=strict"} <= parts
    finally:
        server.stop()
