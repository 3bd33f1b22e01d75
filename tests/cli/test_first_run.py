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
