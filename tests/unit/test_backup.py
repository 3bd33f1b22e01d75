"""The pieces of the pre-migration backup that need no server (issue 23 item 8)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nahida_workers.errors import UserError
from nahida_workers.ledger.backup import (
    BackupFailedError,
    PgDumpMissingError,
    backup_path,
    libpq_target,
    pg_dump,
)


def test_password_goes_to_the_environment_not_the_uri() -> None:
    uri, env = libpq_target(
        "postgresql+psycopg://alice:s3cr%40t@db.example:6543/led?sslmode=require"
    )
    assert uri == "postgresql://alice@db.example:6543/led?sslmode=require"
    assert "s3cr" not in uri
    assert env == {"PGPASSWORD": "s3cr@t"}


def test_no_password_no_env() -> None:
    assert libpq_target("postgresql+psycopg://postgres@127.0.0.1:5432/x") == (
        "postgresql://postgres@127.0.0.1:5432/x",
        {},
    )


def test_sqlite_url_is_refused() -> None:
    with pytest.raises(UserError, match="not a PostgreSQL URL"):
        libpq_target("sqlite:///var/x.sqlite3")


def test_backup_path_names_database_and_utc_time() -> None:
    at = datetime(2026, 12, 1, 18, 5, 9, tzinfo=UTC)
    assert backup_path(Path("b"), "my db/x", at) == Path("b/nahida-my_db_x-20261201T180509Z.dump")


def test_missing_executable(tmp_path: Path) -> None:
    with pytest.raises(PgDumpMissingError, match="--no-backup"):
        pg_dump(
            "postgresql+psycopg://u@h/d", tmp_path / "x.dump", executable=str(tmp_path / "nope")
        )


def test_existing_target_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "x.dump"
    target.write_bytes(b"old")
    with pytest.raises(BackupFailedError, match="already exists"):
        pg_dump("postgresql+psycopg://u@h/d", target, executable="sh")
    assert target.read_bytes() == b"old"


def test_argv_never_holds_the_password(tmp_path: Path) -> None:
    fake = tmp_path / "pg_dump"
    record = tmp_path / "argv"
    fake.write_text(
        f'#!/bin/sh\necho "$@" > {record}\necho "$PGPASSWORD" >> {record}\n'
        'for a in "$@"; do case "$a" in --file=*) echo dump > "${a#--file=}";; esac; done\n'
    )
    fake.chmod(0o755)
    done = pg_dump(
        "postgresql+psycopg://u:pw1@h/d", tmp_path / "o" / "x.dump", executable=str(fake)
    )
    argv, password = record.read_text().splitlines()
    assert "pw1" not in argv and "--format=custom" in argv
    assert password == "pw1"
    assert done.path.read_text() == "dump\n" and done.size_bytes == 5
