"""Run the Alembic migrations programmatically (``nahida migrate``, embedded mode).

The migration scripts ship inside the package, so an installed worker can
migrate without a checkout.  ``config/alembic.ini`` points at the same
directory for people who run ``alembic`` by hand.

Each revision runs in its own transaction and is stamped in
``alembic_version`` when that transaction commits (``transaction_per_migration``
in ``migrations/env.py``): a migration interrupted mid-way (killed, a lost
connection) leaves the database at the last revision that committed, and the
next ``nahida migrate`` continues from there.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "current_revision", "head_revision", "upgrade"]

#: Where the Alembic environment and revisions live.
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` using the packaged migration scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The revision id of the newest packaged migration."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None  # the package ships at least one revision
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database behind ``engine`` (None: never migrated)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database behind ``engine`` to ``revision`` (default: head).

    Uses the engine's own connection so SQLite files and PostgreSQL get the
    same path.  Idempotent: an up-to-date database is left untouched.  Each
    revision commits with its stamp (no outer transaction): an interruption
    keeps the revisions that committed, and running this again resumes.
    """
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        if conn.in_transaction():  # the version read before the first revision
            conn.commit()
