"""A real ``nahida serve`` process (uvicorn) on the real PostgreSQL and Redis."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from nahida_workers.testing.fleet import Fleet, wait_for
from tests.cli.helpers import nahida_script
from tests.integration.conftest import fleet, pg

__all__ = ["Server", "fleet", "pg", "server", "start_server"]


@dataclass
class Server:
    """One ``nahida serve`` process."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(fleet: Fleet, tmp_path: Path, **env: str) -> Server:
    """Start ``nahida serve`` with the fleet's settings and wait for /healthz."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    proc = subprocess.Popen(
        [nahida_script(), "serve", "--port", str(port)],
        cwd=tmp_path,
        env={**fleet.env(), **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", proc, log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"nahida serve exited: {log.read_text()}")
        try:
            return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30, what="nahida serve")
    return server


@pytest.fixture
def server(fleet: Fleet, pg: object, tmp_path: Path) -> Iterator[Server]:
    """``nahida serve`` without a token, on the emptied ledger."""
    running = start_server(fleet, tmp_path)
    yield running
    running.stop()
