"""Every documented exit code and error kind through the INSTALLED ``nahida`` (issue 16).

Each case runs the console script in a subprocess and checks the exit code,
that the error is one line, and that no traceback is printed.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from nahida_workers.core.records import InboxStatus
from nahida_workers.ledger.sql import SqlLedger
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.testing import scripted_spec
from nahida_workers.testing.fleet import make_repo
from tests.cli.helpers import SURVEY, clean_env, nahida
from tests.conftest import truncate

CLOSED_PORT_PG = "postgresql+psycopg://postgres@127.0.0.1:1/nahida"
CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"


# -- 0 and 2: usage errors -------------------------------------------------------
def test_help_exits_0(tmp_path: Path) -> None:
    done = nahida(["--help"], cwd=tmp_path)
    assert done.code == 0 and "Usage" in done.stdout and "Exit codes" in done.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["runs", "list", "--local"], "Missing argument"),
        (["bogus"], "No such command"),
        (["batch"], "Missing argument"),
        (["status", "--no-such-option"], "No such option"),
        (["batch", str(SURVEY), "--workers", "zero"], "--workers"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    done = nahida(args, cwd=tmp_path)
    assert done.code == 2, done.output
    line = done.one_error_line()
    assert line.startswith("error:") and needle in line and "--help" in line


def test_status_local_on_a_fresh_directory_lists_nothing_and_exits_0(tmp_path: Path) -> None:
    done = nahida(["status", "--local"], cwd=tmp_path)
    assert done.code == 0, done.output
    assert "no batches yet" in done.stdout
    as_json = nahida(["status", "--local", "--json"], cwd=tmp_path)
    assert as_json.code == 0 and '"batches": []' in as_json.stdout


# -- 2: input errors ----------------------------------------------------------------
def _job(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / f"job-{uuid.uuid4().hex[:6]}.yaml"
    path.write_bytes(body)
    return path


def test_input_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    cases = {
        # rich markup would eat "[unclosed"; the line must keep it
        "[unclosed": b"name: x\nprompt: [unclosed\n",
        "not UTF-8": b"name: x\nprompt: \xff\xfe caf\xe9\n",
        "expands to more than": b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + b"".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode()
            for i in range(8)
        )
        + b"prompt: hi\n",
        "max_steps": b"name: x\nprompt: hi\nlimits: {max_steps: 0}\n",
    }
    for needle, body in cases.items():
        done = nahida(
            ["batch", str(_job(tmp_path, body)), "--local", "--repo", str(repo)],
            cwd=tmp_path,
            timeout=60,
        )
        assert done.code == 2, (needle, done.output)
        assert needle in done.one_error_line(), done.output


def test_a_non_utf8_argument_is_an_input_error(tmp_path: Path) -> None:
    done = nahida(["steer", "abcd1234", b"caf\xe9 [x]"], cwd=tmp_path)
    assert done.code == 2, done.output
    assert "not valid UTF-8" in done.one_error_line()


# -- 3: infrastructure ------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [["status"], ["migrate"], ["runs", "list", "abcd1234"], ["batch", str(SURVEY), "--repo", "."]],
)
def test_a_closed_database_port_exits_3_naming_the_setting(tmp_path: Path, args: list[str]) -> None:
    make_repo(tmp_path / "r")
    done = nahida(args, cwd=tmp_path / "r", env=clean_env(NAHIDA_DATABASE_URL=CLOSED_PORT_PG))
    assert done.code == 3, done.output
    line = done.one_error_line()
    assert "NAHIDA_DATABASE_URL" in line and "127.0.0.1:1" in line


def test_a_missing_database_says_createdb(tmp_path: Path, postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + f"/nahida_missing_{uuid.uuid4().hex[:6]}"
    for args in (["status"], ["migrate"]):
        done = nahida(args, cwd=tmp_path, env=clean_env(NAHIDA_DATABASE_URL=missing))
        assert done.code == 3, done.output
        line = done.one_error_line()
        assert "does not exist" in line and "createdb" in line and "nahida migrate" in line


def test_postgres_scheme_is_accepted_and_a_malformed_url_is_a_setting_error(
    tmp_path: Path, postgres_url: str
) -> None:
    plain = "postgres://" + postgres_url.split("://", 1)[1]
    done = nahida(["status", "--json"], cwd=tmp_path, env=clean_env(NAHIDA_DATABASE_URL=plain))
    assert done.code == 0, done.output
    bad = nahida(["status"], cwd=tmp_path, env=clean_env(NAHIDA_DATABASE_URL="nonsense::/x"))
    assert bad.code == 2, bad.output
    assert "NAHIDA_DATABASE_URL" in bad.one_error_line()


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://u@127.0.0.1/db", "unsupported scheme 'mysql'"),
        ("postgresql://u:pw@127.0.0.1:notaport/db", "notaport"),
        # no database name: libpq's defaults (the OS user's database) were used
        ("postgresql+psycopg://", "no database name"),
        ("postgresql+psycopg://u:pw@127.0.0.1:5432", "no database name"),
        ("postgres://u:pw@127.0.0.1:5432/", "no database name"),
        ("sqlite://", "no database name"),
    ],
)
def test_an_unusable_database_url_is_a_setting_error_for_every_command(
    tmp_path: Path, url: str, needle: str
) -> None:
    # An uninstalled driver or a port that is not a number was exit 1
    # "internal error" (ModuleNotFoundError / ValueError) at the first query.
    for args in (["status"], ["migrate"], ["schedule", "list"], ["steer", "abcd1234", "hi"]):
        done = nahida(args, cwd=tmp_path, env=clean_env(NAHIDA_DATABASE_URL=url))
        assert done.code == 2, (args, done.output)
        line = done.one_error_line()
        assert "NAHIDA_DATABASE_URL" in line and needle in line and "pw" not in line


def test_schedule_commands_name_the_database_url_they_used(tmp_path: Path) -> None:
    for args in (["schedule", "list"], ["schedule", "run"], ["schedule", "show", "s1"]):
        done = nahida(args, cwd=tmp_path, env=clean_env(NAHIDA_DATABASE_URL=CLOSED_PORT_PG))
        assert done.code == 3, done.output
        line = done.one_error_line()
        assert "127.0.0.1:1/nahida (NAHIDA_DATABASE_URL)" in line and "(unset)" not in line, line


@pytest.mark.parametrize(
    "body", [b"- a\n- b\n", b"provider: {script: 5}\n", b"[unclosed\n", b"caf\xe9: x\n"]
)
def test_mock_llm_with_a_bad_script_is_an_input_error(tmp_path: Path, body: bytes) -> None:
    done = nahida(["mock-llm", "--script", str(_job(tmp_path, body)), "--port", "0"], cwd=tmp_path)
    assert done.code == 2, done.output
    assert "internal error" not in done.one_error_line()


# -- 4: recorded, delivered when the broker is back ------------------------------------
class _NoQueue:
    def publish_session(
        self, session_id: str, *, task_id: str, priority: int | None = None
    ) -> None:
        """Publishes nothing (the session only needs to exist)."""


def _session(ledger: SqlLedger, workspace: Path) -> str:
    dispatcher = Dispatcher(ledger, _NoQueue(), SystemClock())
    session, _ = dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace=str(workspace))
    return session.session_id


def _broker_down_env(postgres_url: str, redis_server: str) -> dict[str, str]:
    return clean_env(
        NAHIDA_DATABASE_URL=postgres_url,
        NAHIDA_BROKER_URL=CLOSED_PORT_REDIS,
        NAHIDA_RESULT_BACKEND_URL=CLOSED_PORT_REDIS,
        NAHIDA_REDIS_URL=f"{redis_server}/10",
        NAHIDA_REDIS_KEY_PREFIX=f"cli:{uuid.uuid4().hex[:6]}:",
    )


def test_steer_with_the_broker_down_says_recorded_and_exits_4_and_cancel_needs_no_broker(
    tmp_path: Path, postgres_url: str, postgres_ledger: SqlLedger, redis_server: str
) -> None:
    session_id = _session(postgres_ledger, tmp_path)
    env = _broker_down_env(postgres_url, redis_server)
    steered = nahida(
        ["steer", session_id[:10], "also check [docs]", "--message-id", "m-1"],
        cwd=tmp_path,
        env=env,
    )
    assert steered.code == 4, steered.output
    assert "recorded; will be delivered when the broker is back" in steered.stderr
    assert len(steered.stderr.strip().splitlines()) == 1, steered.stderr  # never wrapped
    assert steered.stdout == ""  # the notice is on stderr, as batch and trigger say it
    assert "Traceback" not in steered.output
    pending = postgres_ledger.inbox(session_id, statuses=[InboxStatus.PENDING])
    assert [(m.message_id, m.text) for m in pending] == [("m-1", "also check [docs]")]
    assert postgres_ledger.pending_outbox(), "the re-dispatch waits in the outbox for the sweeper"

    # A queued session no worker holds is sealed by the cancel itself: the
    # broker is not needed, so the cancel took effect (exit 0), not "recorded".
    cancelled = nahida(["cancel", session_id], cwd=tmp_path, env=env)
    assert cancelled.code == 0, cancelled.output
    assert f"session {session_id}: cancelled" in cancelled.stdout
    assert "Traceback" not in cancelled.output
    runs = postgres_ledger.runs_of(session_id)
    assert runs[-1].terminal_state is not None and runs[-1].terminal_state.value == "cancelled"


def test_a_batch_with_the_broker_down_records_every_session_and_exits_4(
    tmp_path: Path, postgres_url: str, postgres_ledger: SqlLedger, redis_server: str
) -> None:
    truncate(postgres_ledger.engine)
    repos = [make_repo(tmp_path / f"r{i}") for i in range(3)]
    args: list[str | bytes] = ["batch", str(SURVEY)]
    for repo in repos:
        args += ["--repo", str(repo)]
    done = nahida(args, cwd=tmp_path, env=_broker_down_env(postgres_url, redis_server))
    assert done.code == 4, done.output
    assert "3 session(s) recorded; will be delivered when the broker is back" in done.stderr
    assert "recorded" not in done.stdout  # one stream for the notice: stderr
    assert any(
        "recorded; will be delivered" in line and "nahida status" in line
        for line in done.stderr.splitlines()
    ), done.stderr  # the whole sentence on one line, never wrapped
    assert "Traceback" not in done.output
    assert len(postgres_ledger.sessions()) == 3
    assert len(postgres_ledger.pending_outbox()) == 3


def test_a_schedule_trigger_with_the_broker_down_says_recorded_and_exits_4(
    tmp_path: Path, postgres_url: str, postgres_ledger: SqlLedger, redis_server: str
) -> None:
    # It printed "dispatching  batch X", a WARNING log line, and exited 0.
    truncate(postgres_ledger.engine)
    repos = [make_repo(tmp_path / f"r{i}") for i in range(2)]
    env = _broker_down_env(postgres_url, redis_server)
    repo_args = [arg for repo in repos for arg in ("--repo", str(repo))]
    added = nahida(
        ["schedule", "add", "nightly", "--job", str(SURVEY), "--every", "1h", *repo_args],
        cwd=tmp_path,
        env=env,
    )
    assert added.code == 0, added.output
    done = nahida(["schedule", "trigger", "nightly"], cwd=tmp_path, env=env)
    assert done.code == 4, done.output
    assert done.stdout == "", done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one sentence, never wrapped, on stderr
    assert "recorded; will be delivered when the broker is back" in lines[0]
    assert "Do not repeat it" in lines[0] and "NAHIDA_BROKER_URL" in lines[0]
    assert "Traceback" not in done.output and "WARNING" not in done.stderr, done.output
    assert len(postgres_ledger.sessions()) == 2
    assert len(postgres_ledger.pending_outbox()) == 2
    again = nahida(["schedule", "trigger", "nightly"], cwd=tmp_path, env=env)
    assert again.code == 0 and "skipped_overlap" in again.stdout, again.output  # not re-sent
    added = nahida(
        ["schedule", "add", "hourly", "--job", str(SURVEY), "--every", "1h", *repo_args],
        cwd=tmp_path,
        env=env,
    )
    assert added.code == 0, added.output
    as_json = nahida(["schedule", "trigger", "hourly", "--json"], cwd=tmp_path, env=env)
    assert as_json.code == 4, as_json.output
    assert '"undelivered_sessions": 2' in as_json.stdout
    assert "recorded; will be delivered" in as_json.one_error_line()


def test_watch_that_times_out_says_so_in_one_line_and_exits_1(
    tmp_path: Path, postgres_url: str, postgres_ledger: SqlLedger, redis_server: str
) -> None:
    session_id = _session(postgres_ledger, tmp_path)
    env = _broker_down_env(postgres_url, redis_server)
    for extra in ([], ["--jsonl"]):
        done = nahida(["watch", session_id[:10], "--timeout", "0.5", *extra], cwd=tmp_path, env=env)
        assert done.code == 1, done.output
        line = done.one_error_line()
        assert "timed out" in line and session_id in line and "queued" in line, line


def test_the_ledger_down_is_not_recorded_but_exit_3(tmp_path: Path) -> None:
    done = nahida(
        ["steer", "abcd1234", "hello"],
        cwd=tmp_path,
        env=clean_env(NAHIDA_DATABASE_URL=CLOSED_PORT_PG),
    )
    assert done.code == 3, done.output
    assert "recorded" not in done.output and "NAHIDA_DATABASE_URL" in done.one_error_line()


# -- short ids ---------------------------------------------------------------------
def test_ids_are_accepted_by_unique_prefix_and_ambiguity_is_refused(
    tmp_path: Path, postgres_url: str, postgres_ledger: SqlLedger
) -> None:
    truncate(postgres_ledger.engine)
    dispatcher = Dispatcher(postgres_ledger, _NoQueue(), SystemClock())
    ids = iter(["aaaa1111" + "0" * 24, "aaaa2222" + "0" * 24, "r1" + "0" * 30, "t1", "o1"])
    dispatcher.ids = lambda: next(ids)
    session, _ = dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace=str(tmp_path))
    dispatcher.ids = iter(["aaaa2222" + "0" * 24, "r2" + "0" * 30, "t2", "o2"]).__next__
    dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace=str(tmp_path))
    env = clean_env(NAHIDA_DATABASE_URL=postgres_url)
    listed = nahida(["runs", "list", "aaaa1", "--json"], cwd=tmp_path, env=env)
    assert listed.code == 0, listed.output
    assert session.session_id in listed.stdout
    ambiguous = nahida(["runs", "list", "aaaa"], cwd=tmp_path, env=env)
    assert ambiguous.code == 2 and "ambiguous" in ambiguous.one_error_line()
    unknown = nahida(["runs", "show", "ffff"], cwd=tmp_path, env=env)
    assert unknown.code == 2 and "no run ffff" in unknown.one_error_line()


def test_a_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for args in (
            ["serve", "--port", port],
            ["mock-llm", "--script", str(SURVEY), "--port", port],
        ):
            done = nahida(args, cwd=tmp_path, timeout=60)
            assert done.code == 2, done.output
            assert "Address already in use" in done.one_error_line()
