"""Definitions from flags or a schedules file: validated before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from nahida_workers.errors import ConfigError, UserError
from nahida_workers.schedules.config import build_definition, load_schedules_file
from nahida_workers.schedules.model import Overlap
from nahida_workers.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
SURVEY = ROOT / "config" / "jobs" / "repo-survey.yaml"


_TYPO = {
    "name": "x",
    "prompt": "p",
    "provider": {
        "kind": "scripted",
        "script": [{"tool_calls": [{"id": "g", "name": "Glb", "arguments": {"pattern": "*"}}]}],
    },
}


def _settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


def _build(tmp_path: Path, **fields: object):  # type: ignore[no-untyped-def]
    fields.setdefault("every", "10s")
    fields.setdefault("job", SURVEY)
    return build_definition(
        name="n",
        repos=[tmp_path],
        settings=_settings(),
        **fields,  # type: ignore[arg-type]
    )


def test_a_definition_snapshots_the_job_and_resolves_paths(tmp_path: Path) -> None:
    d = _build(tmp_path, every="1m", catchup_window="1h", jitter="30s", overlap="buffer_one")
    assert d.job["name"] == "repo-survey" and d.job["provider"]["script"]["turns"]
    assert d.job_path == str(SURVEY.resolve())
    assert d.repos == (str(tmp_path.resolve()),)
    assert (d.every_s, d.catchup_window_s, d.jitter_s, d.overlap) == (
        60,
        3600,
        30,
        Overlap.BUFFER_ONE,
    )
    assert (
        _build(tmp_path, every="1m", catchup_window="1h", jitter="30s", overlap="buffer_one") == d
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"every": None, "cron": "* * *"}, "invalid cron expression"),
        ({"cron": "* * * * *"}, "exactly one of cron and every"),
        ({"every": "soon"}, "not a duration"),
        ({"timezone": "Mars/Base", "every": None, "cron": "0 3 * * *"}, "unknown time zone"),
        ({"overlap": "sometimes"}, "not a valid Overlap"),
        ({"catchup_window": "5s"}, "must exceed the tick interval"),
        ({"catchup_window": "forever"}, "not a duration"),
        ({"every": None, "cron": "0 3 31 2 *"}, "never fires"),
        ({"every": "inf"}, "must be finite"),
        ({"catchup_window": "inf"}, "must be finite"),
        ({"every": "99999999999d"}, "less than or equal"),
        ({"jitter": "1e30"}, "less than or equal"),
        ({"jitter": "10s"}, r"jitter \(10s\) must be shorter than the schedule's period \(10s\)"),
        ({"jitter": "1m"}, r"period \(10s\)"),
        ({"every": None, "cron": "*/15 * * * *", "jitter": "15m"}, r"period \(900s\)"),
        ({"every": None, "cron": "0,1 3 * * *", "jitter": "90s"}, r"period \(60s\)"),
        ({"every": "4s"}, r"period \(4s\) is shorter than the tick interval .* \(5s\)"),
        ({"every": "1s"}, r"--every 5s or more"),
        ({"job": {"name": "x"}}, "invalid inline job"),
        ({"job": {"name": "x", "prompt": "p", "tools": ["Nope"]}}, "unknown tool"),
        ({"job": {"name": "x", "prompt": "p", "tools": ["Glob"]}}, "scripted provider needs"),
        (  # the script is checked as `nahida batch` checks it (issue 10 item 9)
            {"job": {**_TYPO, "tools": ["Glob"]}},
            r"calls tools the job does not offer: \['Glb'\]",
        ),
    ],
)
def test_bad_input_is_a_config_error_naming_it(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _build(tmp_path, **fields)


def test_a_period_of_one_tick_is_kept_and_cron_is_held_to_the_tick(tmp_path: Path) -> None:
    assert _build(tmp_path, every="5s").every_s == 5
    slow_ticks = Settings(_env_file=None, schedule_tick_s=120)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"period \(60s\) is shorter"):
        build_definition(
            name="n", job=SURVEY, repos=[tmp_path], cron="* * * * *", settings=slow_ticks
        )


def test_a_jitter_shorter_than_the_period_is_kept(tmp_path: Path) -> None:
    assert _build(tmp_path, jitter="9.999s").jitter_s == 9.999
    nightly = _build(tmp_path, every=None, cron="0 3 * * 1-5", jitter="23h")
    assert nightly.jitter_s == 23 * 3600


def test_missing_repositories_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        build_definition(
            name="n", job=SURVEY, repos=[tmp_path / "x"], every=5, settings=_settings()
        )
    with pytest.raises(UserError, match="no repositories"):
        build_definition(name="n", job=SURVEY, every=5, settings=_settings())


def test_a_schedules_file_is_validated_whole(tmp_path: Path) -> None:
    listing = tmp_path / "repos.txt"
    listing.write_text(f"# comment\n{tmp_path}\n\n{tmp_path}\n")
    good = tmp_path / "ok.yaml"
    good.write_text(
        f"schedules:\n  - name: a\n    job: {SURVEY}\n    repos_from: {listing}\n    every: 1m\n"
        f"  - name: b\n    job: {{name: inline, prompt: hi, tools: [Glob],\n"
        f"          provider: {{kind: scripted, script: {{turns: [{{text: hi}}]}}}}}}\n"
        f"    repos: [{tmp_path}]\n    cron: '0 3 * * *'\n    timezone: America/New_York\n"
    )
    a, b = load_schedules_file(good, _settings())
    assert a.repos == (str(tmp_path.resolve()),) and a.every_s == 60
    assert b.job_path is None and b.job["name"] == "inline" and b.timezone == "America/New_York"
    dup = tmp_path / "dup.yaml"
    dup.write_text(good.read_text().replace("name: b", "name: a"))
    with pytest.raises(ConfigError, match="unique: a"):
        load_schedules_file(dup, _settings())
    fast = tmp_path / "fast.yaml"
    fast.write_text(good.read_text().replace("every: 1m", "every: 1s"))
    with pytest.raises(ConfigError, match=r"schedule a: the period \(1s\) is shorter"):
        load_schedules_file(fast, _settings())
    typo = tmp_path / "typo.yaml"
    typo.write_text(good.read_text().replace("every: 1m", "evry: 1m"))
    with pytest.raises(ConfigError, match=r"schedules\[0\]\.evry"):
        load_schedules_file(typo, _settings())
    with pytest.raises(ConfigError, match="'schedules' list"):
        (tmp_path / "empty.yaml").write_text("{}\n")
        load_schedules_file(tmp_path / "empty.yaml", _settings())
