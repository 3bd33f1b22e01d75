"""Run the Alembic migrations programmatically (``nahida migrate``, embedded mode).

The migration scripts ship inside the package, so an installed worker can
migrate without a checkout.  ``config/alembic.ini`` points at the same
directory for people who run ``alembic`` by hand.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "upgrade"]

#: Where the Alembic environment and revisions live.
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` using the packaged migration scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database behind ``engine`` to ``revision`` (default: head).

    Uses the engine's own connection so SQLite files and PostgreSQL get the
    same path.  Idempotent: an up-to-date database is left untouched.
    """
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
