"""What the CLI prints: ids and states whole at 80 columns, markup escaped, JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from nahida_workers.cli import render
from nahida_workers.cli.ids import shortener
from nahida_workers.cli.main import app
from nahida_workers.core.events import SessionStatus
from nahida_workers.errors import ConfigError
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import SystemClock
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.observe.channel import stream_key
from nahida_workers.testing import ListTaskQueue, scripted_spec
from nahida_workers.yaml_input import load_yaml


def _row(i: int, workspace: str, state: str) -> dict[str, object]:
    return {
        "session_id": f"{i:02d}" + "a" * 30,
        "workspace": workspace,
        "status": "done",
        "run_id": f"{i:02d}" + "b" * 30,
        "runs": 1,
        "terminal_state": state,
        "reason": "answer_accepted_because_the_evidence_contract_held",
        "failure_code": None,
        "turns": 3,
        "tool_calls": 6,
        "seconds": 1.25,
        "queued_seconds": 0.5,
    }


@pytest.mark.parametrize("width", [80, 100, 120])
def test_ids_and_states_stay_whole_in_narrow_terminals(width: int) -> None:
    rows = [_row(i, f"/srv/repos/a-rather-long-repository-name-{i}", "completed") for i in range(3)]
    rows.append(_row(3, "/srv/x", "unverified"))
    report = {"batch_id": "c" * 32, "job": "survey", "sessions": rows}
    console = Console(width=width, record=True, color_system=None)
    console.print(render.batch_table(report, width=width))
    text = console.export_text()
    short = shortener([r["session_id"] for r in rows] + [r["run_id"] for r in rows])
    for row in rows:
        assert short[row["session_id"]] in text and short[row["run_id"]] in text
    assert text.count("completed") == 3 and "unverified" in text
    assert "…" not in text


def test_markup_in_user_text_is_printed_literally() -> None:
    rows = [_row(0, "/srv/repo[bold]x", "completed")]
    rows[0]["reason"] = "[red]oops"
    report = {"batch_id": "d" * 32, "job": "job [unclosed", "sessions": rows}
    console = Console(width=200, record=True, color_system=None)
    console.print(render.batch_table(report))
    text = console.export_text()
    assert "repo[bold]x" in text and "[red]oops" in text and "job [unclosed" in text


def test_short_ids_grow_until_unique() -> None:
    ids = ["abcdef12" + "0" * 24, "abcdef12" + "1" * 24, "ffff" + "0" * 28]
    short = shortener(ids)
    assert short[ids[0]] == "abcdef120" and short[ids[1]] == "abcdef121"
    assert short[ids[2]] == "ffff0000"


def test_alias_bomb_is_refused_before_it_expands() -> None:
    bomb = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )
    with pytest.raises(ConfigError, match="expands to more than"):
        load_yaml(bomb, source="job")
    assert load_yaml("a: &a [1, 2]\nb: *a\n", source="job") == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(ConfigError, match="recursive"):
        load_yaml("a: &a [*a]\n", source="job")


def _bomb(tail: str) -> str:
    return (
        "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
            for i in range(8)
        )
        + tail
    )


def test_an_inline_provider_script_alias_bomb_is_refused() -> None:
    """Inline script text (a job's or an API request's) had no alias limit: it hung the server."""
    from nahida_workers.providers.scripted import load_script

    with pytest.raises(ConfigError, match="expands to more than"):
        load_script(_bomb("turns: *i\n"))
    assert load_script("turns: [{text: hi}]").turns[0].text == "hi"


def test_a_schedules_file_alias_bomb_is_refused(tmp_path: Path) -> None:
    """``schedule apply`` read its file with a bare safe_load: a bomb hung it."""
    from nahida_workers.schedules.config import load_schedules_file
    from nahida_workers.settings import Settings

    path = tmp_path / "schedules.yaml"
    path.write_text(_bomb("schedules: [{name: s, job: {name: j, prompt: hi, tags: *i}}]\n"))
    with pytest.raises(ConfigError, match="expands to more than"):
        load_schedules_file(path, Settings())
    path.write_bytes(b"schedules: [\xff]\n")
    with pytest.raises(ConfigError, match=r"schedules\.yaml is not UTF-8"):
        load_schedules_file(path, Settings())


def test_watch_jsonl_prints_one_unwrapped_json_object_per_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "ledger.sqlite3"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    ledger = SqlLedger(engine=engine)
    dispatcher = Dispatcher(ledger, ListTaskQueue(), SystemClock())
    session, _ = dispatcher.submit(scripted_spec([{"text": "hi"}]), workspace=str(tmp_path))
    with ledger.transaction() as tx:
        ledger.set_session_status(
            tx, session.session_id, SessionStatus.DONE, at=SystemClock().now()
        )
    monkeypatch.setenv("NAHIDA_ENV_FILE", "/dev/null")
    monkeypatch.setenv("NAHIDA_DATABASE_URL", f"sqlite:///{db}")
    monkeypatch.setenv("NAHIDA_REDIS_URL", "fakeredis://")
    from nahida_workers.runtime.wiring import redis_client
    from nahida_workers.settings import load_settings

    client = redis_client(load_settings())
    key = stream_key(session.session_id)
    long_text = "a [bold] line " * 20
    client.xadd(key, {"kind": "commentary", "data": json.dumps({"text": long_text})})
    client.xadd(key, {"kind": "done", "data": json.dumps({"state": "completed"})})
    result = CliRunner().invoke(app, ["watch", session.session_id[:8], "--jsonl"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["commentary", "done"]
    assert json.loads(lines[0])["data"]["text"] == long_text


def test_the_overlap_choices_are_the_schedule_models() -> None:
    from nahida_workers.cli.schedule_cmds import OverlapChoice
    from nahida_workers.schedules.model import Overlap

    assert [c.value for c in OverlapChoice] == [o.value for o in Overlap]


def test_runs_list_never_wraps_a_reason_or_state_at_80_columns() -> None:
    """``runs list`` at 80 columns: every id, state and reason on one line, whole.

    The widest reason code was folded over two lines (``answer_a`` /
    ``ccepted``) when the table also carried full start and end timestamps.
    """
    from datetime import UTC, datetime, timedelta

    from nahida_workers.core.events import ReasonCode, TerminalState
    from nahida_workers.core.records import RunRecord

    start = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    widest = max(ReasonCode, key=lambda r: len(r.value))
    runs = [
        RunRecord(
            run_id=f"{i:02d}" + "b" * 30,
            session_id="s" * 32,
            provider="scripted",
            model="scripted",
            trace_id="t",
            started_at=start,
            ended_at=start + timedelta(seconds=3.25),
            terminal_state=state,
            terminal_reason=reason,
        )
        for i, (state, reason) in enumerate(
            [
                (TerminalState.UNVERIFIED, widest),
                (TerminalState.COMPLETED, ReasonCode.ANSWER_ACCEPTED),
            ]
        )
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(render.runs_table("s" * 32, runs))
    lines = console.export_text().splitlines()
    short = shortener(r.run_id for r in runs)
    for run in runs:
        row = next(line for line in lines if short[run.run_id] in line)
        assert run.terminal_state is not None and run.terminal_reason is not None
        assert run.terminal_state.value in row and run.terminal_reason.value in row
        assert "3.2s" in row
    assert "…" not in "\n".join(lines)
