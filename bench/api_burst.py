"""A burst of steering against a real ``nahida serve``: p50/p99 of 200 concurrent steer/cancel.

Starts ``nahida serve`` (its own uvicorn process) on a scratch PostgreSQL
database and a private ``redis-server`` (the broker: every steer publishes a
task, none is consumed), posts ``--sessions`` sessions, then sends
``--requests`` requests at once -- one in ``--cancel-every`` a cancel, the
rest steering messages with distinct ids -- spread round-robin over the
sessions, each on its own connection.  The server's inbox bound is raised
(``NAHIDA_INBOX_MAX_USER``) so every steer is a real ledger write rather than
a quick 429.

    .venv/bin/python -m bench.api_burst                 # 200 requests on one session
    .venv/bin/python -m bench.api_burst --sessions 10   # the same spread over ten sessions
    .venv/bin/python -m bench.api_burst --rounds 3      # three bursts, one line each

A warm-up burst of 16 comes first (a fresh process opens its pool's
connections and prepares its statements on its first requests).  Prints,
per burst, the status codes, p50, p99 and max latency (seconds, from
the moment every connection was open to each response) and the wall time.
Target: p99 < 2 s with no 5xx but 503 (and every 503 carries Retry-After).
Exit status: 0 when every burst met it, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.chaos_rig import RedisServer, free_port
from bench.common import percentile, scratch_database
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import make_engine
from nahida_workers.testing.fleet import make_repo

TARGET_P99_S = 2.0
#: A request without an answer after this long counts as status 0 (a stall).
CLIENT_TIMEOUT_S = 60.0
JOB = {
    "name": "burst",
    "prompt": "wait for steering",
    "tools": ["Read"],
    "provider": {"kind": "scripted", "script": {"turns": [{"text": "done"}]}},
}


@dataclass
class Burst:
    """What one burst saw."""

    statuses: Counter[int]
    latencies: list[float]
    wall_s: float
    missing_retry_after: int

    @property
    def ok(self) -> bool:
        """p99 under the target, no 5xx but 503, every 503 with Retry-After."""
        bad = sum(
            n for code, n in self.statuses.items() if code <= 0 or (code >= 500 and code != 503)
        )
        p99 = percentile(self.latencies, 0.99)
        return bad == 0 and self.missing_retry_after == 0 and p99 < TARGET_P99_S

    def line(self) -> str:
        """One line: statuses, p50/p99/max, wall."""
        codes = ", ".join(f"{n}x{code}" for code, n in sorted(self.statuses.items()))
        return (
            f"{len(self.latencies)} requests: {codes}; "
            f"p50 {percentile(self.latencies, 0.5):.3f} s, "
            f"p99 {percentile(self.latencies, 0.99):.3f} s, "
            f"max {max(self.latencies):.3f} s; wall {self.wall_s:.3f} s"
        )


def nahida_script() -> str:
    """The ``nahida`` console script beside this interpreter."""
    return str(Path(sys.executable).parent / "nahida")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(env: dict[str, str], workdir: Path) -> Iterator[tuple[str, int]]:
    """``nahida serve`` on a free port with ``env``; yields its base URL and pid."""
    port = free_port()
    log = workdir / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [nahida_script(), "serve", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"nahida serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"nahida serve did not answer: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def server_env(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of the server: scratch ledger, private Redis, raised inbox bound."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NAHIDA_", "CELERY"))}
    prefix = f"burst:{uuid.uuid4().hex[:8]}:"
    env.update(
        {
            "NAHIDA_DATABASE_URL": database_url,
            "NAHIDA_BROKER_URL": f"{redis_url}/0",
            "NAHIDA_RESULT_BACKEND_URL": f"{redis_url}/1",
            "NAHIDA_REDIS_URL": f"{redis_url}/2",
            "NAHIDA_REDIS_KEY_PREFIX": prefix,
            "NAHIDA_BROKER_KEY_PREFIX": prefix,
            "NAHIDA_ENV_FILE": "/dev/null",
            "NAHIDA_INBOX_MAX_USER": "100000",
            **extra,
        }
    )
    return env


def post_sessions(url: str, workspace: Path, n: int, headers: dict[str, str]) -> list[str]:
    """Create ``n`` sessions; their ids."""
    ids = []
    with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
        for _ in range(n):
            answer = http.post("/v1/sessions", json={"job": JOB, "workspace": str(workspace)})
            if answer.status_code not in (201, 202):
                raise SystemExit(f"cannot create a session: {answer.status_code} {answer.text}")
            ids.append(answer.json()["session"]["session_id"])
    return ids


def request_bytes(method: str, path: str, host: str, body: bytes, headers: dict[str, str]) -> bytes:
    """One HTTP/1.1 request, ``Connection: close``."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def burst(
    url: str,
    session_ids: list[str],
    *,
    requests: int,
    cancel_every: int,
    headers: dict[str, str] | None = None,
) -> Burst:
    """Send ``requests`` steer/cancel requests at once, each on its own open connection.

    The client is plain asyncio streams, not an HTTP library: with hundreds of
    connections in one process a client library's own pool became the
    bottleneck (the server sat idle while the client was at 100% CPU).  Every
    connection is opened first, so the burst times the server's work, not TCP
    set-up; the clock starts when every request is ready to be written.
    """
    host_port = url.removeprefix("http://")
    host, port = host_port.split(":")
    start = asyncio.Event()
    t0 = 0.0

    def payload(i: int) -> bytes:
        session_id = session_ids[i % len(session_ids)]
        if cancel_every and i % cancel_every == cancel_every - 1:
            return request_bytes(
                "POST", f"/v1/sessions/{session_id}/cancel", host_port, b"", headers or {}
            )
        body = json.dumps({"text": f"steer {i}", "message_id": uuid.uuid4().hex}).encode()
        return request_bytes(
            "POST", f"/v1/sessions/{session_id}/steer", host_port, body, headers or {}
        )

    async def one(i: int) -> tuple[int, float, bool]:
        data = payload(i)
        reader, writer = await asyncio.open_connection(host, int(port))
        await start.wait()
        try:
            writer.write(data)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), CLIENT_TIMEOUT_S)
        except TimeoutError:  # no answer in the client's timeout: status 0
            return 0, time.perf_counter() - t0, False
        except OSError:  # the connection broke: status -1
            return -1, time.perf_counter() - t0, False
        finally:
            writer.close()
        took = time.perf_counter() - t0
        head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        status = int(head.split(" ", 2)[1]) if head.startswith("http/") else -1
        return status, took, "\r\nretry-after:" in head

    tasks = [asyncio.create_task(one(i)) for i in range(requests)]
    await asyncio.sleep(0.5)  # every connection is open, every task waits on the event
    t0 = time.perf_counter()
    start.set()
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    statuses = Counter(code for code, _t, _r in results)
    missing = sum(1 for code, _t, has in results if code == 503 and not has)
    return Burst(statuses, [t for _c, t, _r in results], wall, missing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--cancel-every", type=int, default=10, help="one cancel in N (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)"
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)
    with (
        scratch_database("nahida_bench_burst") as (url, _dsn),
        tempfile.TemporaryDirectory(prefix="nahida-bench-burst-") as tmp,
    ):
        root = Path(tmp)
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        redis_server = RedisServer(root)
        redis_server.start()
        try:
            repo = make_repo(root / "repo")
            with serving(server_env(url, redis_server.url, **extra), root) as (base, pid):
                print(
                    f"nahida serve on PostgreSQL, {args.requests} concurrent requests "
                    f"(1 in {args.cancel_every} a cancel) over {args.sessions} session(s); "
                    f"{os.cpu_count()} CPUs"
                )
                ok = True
                warm_ids = post_sessions(base, repo, 1, {})  # open the pool, prepare statements
                asyncio.run(burst(base, warm_ids, requests=16, cancel_every=4))
                for n in range(args.rounds):
                    ids = post_sessions(base, repo, args.sessions, {})  # fresh ones each burst
                    used = cpu_s(pid)
                    result = asyncio.run(
                        burst(base, ids, requests=args.requests, cancel_every=args.cancel_every)
                    )
                    ok = ok and result.ok
                    cpu = cpu_s(pid) - used
                    print(f"burst {n + 1}: {result.line()}; server CPU {cpu:.2f} s")
        finally:
            redis_server.stop()
    print(f"target p99 < {TARGET_P99_S:.0f} s, no 500: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
