"""The Bash sandbox on a real fleet: a session worker, ``celery beat`` and ``nahida serve``.

Every fleet process is started with secrets in its environment (a provider
key, the API token).  A Bash command run by the worker tries to read them
from every process it can find, raw, base64-encoded and reversed (masking
only catches the raw shape).  It must see no process but its own, and each
fleet process's own ``/proc/PID/environ`` must be empty of them too (the
second line: the secrets left the environment at start).  A job without
``network`` cannot reach Redis on 127.0.0.1:6379; one with ``network: true``
can.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from nahida_workers.core.events import EventType
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import Fleet, make_repo, submit, wait_done
from tests.api.conftest import start_server

pytestmark = pytest.mark.slow

KEY = "sk-planted" + uuid.uuid4().hex
TOKEN = "tok-planted" + uuid.uuid4().hex

STEAL = (
    "for p in /proc/[0-9]*; do echo \"proc ${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done; "
    "for pid in {pids}; do rev /proc/$pid/environ; base64 -w0 /proc/$pid/environ; echo; "
    "base64 -w0 /proc/$pid/cmdline; echo; done; "
    "for f in /proc/[0-9]*/environ; do base64 -w0 $f; echo; rev $f; echo; done"
)
PING = "exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\\r\\n' >&3 && timeout 5 head -c 7 <&3"


def _bash_session(command: str, **spec: Any) -> Any:
    call = {"id": "c", "name": "Bash", "arguments": {"command": command}}
    return scripted_spec([{"text": "run", "tool_calls": [call]}, {"text": "ok"}], **spec)


def _result(pg: SqlLedger, session_id: str) -> dict[str, Any]:
    (run,) = pg.runs_of(session_id)
    (result,) = [e.payload for e in pg.events(run.run_id) if e.type is EventType.TOOL_RESULT]
    return dict(result)


def _decoded(text: str) -> str:
    out = [text]
    for line in text.splitlines():
        out.append(line[::-1])
        with contextlib.suppress(ValueError):
            out.append(base64.b64decode(line, validate=True).decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.fixture
def planted(postgres_url: str, redis_server: str, tmp_path: Path) -> Any:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(
        postgres_url=postgres_url,
        redis_url=redis_server,
        workdir=logs,
        extra_env={"MY_LLM_KEY": KEY, "OPENAI_API_KEY": KEY, "NAHIDA_API_TOKEN": TOKEN},
    )
    yield fleet
    fleet.stop()


def test_bash_reads_no_secret_of_serve_beat_or_its_worker(
    planted: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    worker = planted.start_worker(queues="sessions", concurrency=1)
    beat = planted.start_beat()
    server = start_server(planted, tmp_path)
    try:
        pids = {"worker": worker.proc.pid, "beat": beat.proc.pid, "serve": server.proc.pid}
        for name, pid in pids.items():  # the second line: no secret left in any environment
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert KEY.encode() not in environ and TOKEN.encode() not in environ, name
        command = STEAL.replace("{pids}", " ".join(map(str, pids.values())))
        session_id = submit(
            planted.dispatcher(pg), _bash_session(command), make_repo(tmp_path / "r")
        )
        wait_done(pg, session_id, timeout=60)
        result = _result(pg, session_id)
        content = str(result["content"])
        listed = [line for line in content.splitlines() if line.startswith("proc ")]
        assert 0 < len(listed) <= 6, listed
        for line in listed:  # only the sandbox's own processes
            assert "celery" not in line and "nahida" not in line and "uvicorn" not in line, line
        for pid in pids.values():
            assert f"cannot open /proc/{pid}/environ: No such file or directory" in content
        haystack = _decoded(content)
        assert KEY not in haystack and TOKEN not in haystack
    finally:
        server.stop()


def test_the_network_is_there_only_when_the_job_says_so(
    planted: Fleet, pg: SqlLedger, tmp_path: Path
) -> None:
    planted.start_worker(queues="sessions", concurrency=2)
    dispatcher = planted.dispatcher(pg)
    repo = make_repo(tmp_path / "r")
    closed = submit(dispatcher, _bash_session(PING), repo)
    opened = submit(dispatcher, _bash_session(PING, network=True), repo)
    for session_id in (closed, opened):
        wait_done(pg, session_id, timeout=60)
    assert _result(pg, closed)["status"] == "error"
    assert "+PONG" not in str(_result(pg, closed)["content"])
    assert _result(pg, opened)["status"] == "ok"
    assert "+PONG" in str(_result(pg, opened)["content"])
