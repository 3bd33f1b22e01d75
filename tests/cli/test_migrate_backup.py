"""``nahida migrate`` on a real PostgreSQL: pg_dump first, resumable after an interruption.

Issue 23 item 8.  One row per rule:

==========================================  ===========================================
rule                                        test
==========================================  ===========================================
pg_dump runs before the migration           test_dump_is_taken_before_migrating
the dump goes to --backup-dir, mode 0600    test_dump_is_taken_before_migrating
default place: var/backups under the cwd    test_default_backup_dir
--no-backup skips it                        test_no_backup
a missing pg_dump: one line, --no-backup    test_missing_pg_dump_is_a_clear_error
a failing pg_dump: nothing migrated         test_failing_pg_dump_migrates_nothing
nothing pending: no dump                    test_up_to_date_takes_no_dump
killed mid-way, run again: head             test_killed_mid_way_then_rerun_reaches_head
SQLite (--local) is not dumped              test_sqlite_is_not_dumped
the password never reaches argv             tests/unit/test_backup.py
==========================================  ===========================================
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from nahida_workers.ledger.migrate import current_revision, head_revision, upgrade
from nahida_workers.ledger.sql import make_engine
from tests.cli.helpers import clean_env, nahida, nahida_script
from tests.conftest import PG_ADMIN_DSN, PG_URL_BASE, need_service

#: The last revision before one that alters ``sessions`` (0007 adds columns to it).
BEFORE_ALTER = "0004_artifacts_crashes"
#: Applied (and stamped) by the interrupted run before it blocks on ``sessions``.
STAMPED_MID_WAY = "0006_schedules"


@pytest.fixture
def fresh_db() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test; its SQLAlchemy URL."""
    name = f"nahida_mig_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        need_service("PostgreSQL", exc)
    yield f"{PG_URL_BASE}/{name}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _at(url: str, revision: str) -> None:
    engine = make_engine(url)
    upgrade(engine, revision)
    engine.dispose()


def _revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def _env(url: str, **extra: str) -> dict[str, str]:
    return clean_env(NAHIDA_DATABASE_URL=url, **extra)


def _restore_list(dump: Path) -> str:
    done = subprocess.run(["pg_restore", "--list", str(dump)], capture_output=True, check=True)
    return done.stdout.decode()


def test_dump_is_taken_before_migrating(fresh_db: str, tmp_path: Path) -> None:
    _at(fresh_db, BEFORE_ALTER)
    backups = tmp_path / "dumps"
    result = nahida(["migrate", "--backup-dir", str(backups)], cwd=tmp_path, env=_env(fresh_db))
    assert result.code == 0, result.output
    dumps = list(backups.glob("nahida-*.dump"))
    assert len(dumps) == 1, result.output
    dump = dumps[0]
    assert f"backup: {dump}" in result.stdout
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600
    listing = _restore_list(dump)
    # The dump holds the schema as it was before: sessions yes, schedules (0006) not yet.
    assert "TABLE public sessions" in listing
    assert "schedules" not in listing
    assert not list(backups.glob("*.partial"))
    assert _revision(fresh_db) == head_revision()


def test_default_backup_dir(fresh_db: str, tmp_path: Path) -> None:
    result = nahida(["migrate"], cwd=tmp_path, env=_env(fresh_db))
    assert result.code == 0, result.output
    assert len(list((tmp_path / "var" / "backups").glob("nahida-nahida_mig_*.dump"))) == 1


def test_no_backup(fresh_db: str, tmp_path: Path) -> None:
    result = nahida(
        ["migrate", "--no-backup", "--backup-dir", str(tmp_path / "d")],
        cwd=tmp_path,
        env=_env(fresh_db),
    )
    assert result.code == 0, result.output
    assert not (tmp_path / "d").exists()
    assert "no backup (--no-backup)" in result.stderr
    assert _revision(fresh_db) == head_revision()


def test_missing_pg_dump_is_a_clear_error(fresh_db: str, tmp_path: Path) -> None:
    _at(fresh_db, BEFORE_ALTER)
    result = nahida(
        ["migrate", "--pg-dump", str(tmp_path / "no-such-pg_dump")],
        cwd=tmp_path,
        env=_env(fresh_db),
    )
    assert result.code == 2, result.output
    line = result.one_error_line()
    assert "not found" in line and "--no-backup" in line, line
    assert _revision(fresh_db) == BEFORE_ALTER  # nothing migrated


def test_failing_pg_dump_migrates_nothing(fresh_db: str, tmp_path: Path) -> None:
    _at(fresh_db, BEFORE_ALTER)
    fake = tmp_path / "pg_dump"
    fake.write_text("#!/bin/sh\necho 'pg_dump: error: server version mismatch' >&2\nexit 1\n")
    fake.chmod(0o755)
    backups = tmp_path / "dumps"
    result = nahida(
        ["migrate", "--pg-dump", str(fake), "--backup-dir", str(backups)],
        cwd=tmp_path,
        env=_env(fresh_db),
    )
    assert result.code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "server version mismatch" in lines[0], result.output
    assert "--no-backup" in lines[0]
    assert list(backups.iterdir()) == []  # no partial file left behind
    assert _revision(fresh_db) == BEFORE_ALTER


def test_up_to_date_takes_no_dump(fresh_db: str, tmp_path: Path) -> None:
    _at(fresh_db, "head")
    result = nahida(
        ["migrate", "--backup-dir", str(tmp_path / "d")], cwd=tmp_path, env=_env(fresh_db)
    )
    assert result.code == 0, result.output
    assert f"already at {head_revision()}" in result.stdout
    assert not (tmp_path / "d").exists()


def _wait(predicate: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_killed_mid_way_then_rerun_reaches_head(fresh_db: str, tmp_path: Path) -> None:
    """SIGKILL while a revision waits on a lock: earlier steps stay stamped; re-run: head."""
    _at(fresh_db, BEFORE_ALTER)
    dsn = fresh_db.replace("postgresql+psycopg://", "postgresql://")
    holder = psycopg.connect(dsn)
    holder.execute("LOCK TABLE sessions IN ACCESS SHARE MODE")  # 0007's ALTER waits on it
    proc = subprocess.Popen(
        [nahida_script(), "migrate", "--no-backup"],
        cwd=tmp_path,
        env=_env(fresh_db),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with psycopg.connect(dsn, autocommit=True) as watcher:

            def blocked_on_sessions() -> bool:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%sessions%'"
                ).fetchone()
                return bool(row and row[0])

            _wait(blocked_on_sessions, "the migration to block on the sessions table")
            stamped = watcher.execute("SELECT version_num FROM alembic_version").fetchone()
            assert stamped == (STAMPED_MID_WAY,)  # 0006 committed with its stamp
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            # The server learns of the dead client only after the lock wait: end it as a
            # crash would (its open transaction rolls back).
            watcher.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        holder.close()
    assert proc.returncode == -signal.SIGKILL
    assert _revision(fresh_db) == STAMPED_MID_WAY
    result = nahida(["migrate", "--no-backup"], cwd=tmp_path, env=_env(fresh_db))
    assert result.code == 0, result.output
    assert f"{STAMPED_MID_WAY} -> {head_revision()}" in result.stdout
    assert _revision(fresh_db) == head_revision()
    engine = make_engine(fresh_db)
    with engine.connect() as conn:  # 0007's columns are there once
        cols = conn.execute(
            text(
                "SELECT count(*) FROM information_schema.columns "
                "WHERE table_name = 'sessions' AND column_name = 'root_id'"
            )
        ).scalar()
    engine.dispose()
    assert cols == 1


def test_sqlite_is_not_dumped(tmp_path: Path) -> None:
    db = tmp_path / "l.sqlite3"
    result = nahida(
        ["migrate", "--local", "--db", str(db), "--backup-dir", str(tmp_path / "d")],
        cwd=tmp_path,
    )
    assert result.code == 0, result.output
    assert not (tmp_path / "d").exists()
    engine = make_engine(f"sqlite:///{db}")
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
