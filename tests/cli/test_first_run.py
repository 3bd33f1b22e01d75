"""First-run papercuts of issue 25 item 6, as a user meets them on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import nahida

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["migrate"],
        ["schedule", "list"],
        ["runs", "show", "abc"],
    ],
)
def test_a_db_in_a_missing_folder_is_refused_with_exit_2(tmp_path: Path, args: list[str]) -> None:
    typo = tmp_path / "vra" / "nahida.sqlite3"
    done = nahida([*args, "--local", "--db", str(typo)], cwd=tmp_path)
    assert done.code == 2, done.output
    line = done.one_error_line()
    assert f"the folder {typo.parent} does not exist" in line and "--create-db" in line
    assert not typo.parent.exists()  # nothing was created


def test_create_db_makes_the_folder_and_the_default_db_needs_no_flag(tmp_path: Path) -> None:
    wanted = tmp_path / "new" / "deeper" / "ledger.sqlite3"
    made = nahida(["migrate", "--local", "--db", str(wanted), "--create-db"], cwd=tmp_path)
    assert made.code == 0, made.output
    assert wanted.is_file()
    again = nahida(["status", "--local", "--db", str(wanted), "--json"], cwd=tmp_path)
    assert again.code == 0, again.output  # the folder exists now: no flag needed
    default = nahida(["status", "--local", "--json"], cwd=tmp_path)
    assert default.code == 0, default.output  # var/ of the README's first run is made
    assert (tmp_path / "var").is_dir()


def test_a_removed_schedule_and_its_fires_stay_reachable(tmp_path: Path) -> None:
    import json

    from nahida_workers.testing.fleet import make_repo
    from tests.cli.helpers import SURVEY

    repo = make_repo(tmp_path / "repo")
    local = ["--local", "--db", str(tmp_path / "l.sqlite3")]
    add = ["schedule", "add", "nightly", "--job", str(SURVEY), "--every", "1h"]
    added = nahida([*add, "--repo", str(repo), *local], cwd=tmp_path)
    assert added.code == 0, added.output
    fired = nahida(["schedule", "trigger", "nightly", "--json", *local], cwd=tmp_path)
    assert fired.code == 0, fired.output
    batch_id = json.loads(fired.stdout)["batch_id"]
    removed = nahida(["schedule", "remove", "nightly", *local], cwd=tmp_path)
    assert removed.code == 0, removed.output
    gone = nahida(["schedule", "show", "nightly", *local], cwd=tmp_path)
    assert gone.code == 2 and "--removed" in gone.one_error_line()
    shown = nahida(["schedule", "show", "nightly", "--removed", "--json", *local], cwd=tmp_path)
    assert shown.code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["state"] == "removed" and doc["removed_at"] and doc["next_fire"] is None
    assert [(f["kind"], f["batch_id"]) for f in doc["fires"]] == [("manual", batch_id)]
    text = nahida(["schedule", "show", doc["schedule_id"][:8], "--removed", *local], cwd=tmp_path)
    assert text.code == 0 and batch_id in text.stdout and "(removed)" in text.stdout, text.output
    listed = nahida(["schedule", "list", "--removed", "--json", *local], cwd=tmp_path)
    assert [s["name"] for s in json.loads(listed.stdout)] == ["nightly"]
