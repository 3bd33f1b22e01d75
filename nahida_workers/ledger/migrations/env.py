"""Alembic environment for the nahida ledger.

The URL comes from the Alembic config (``sqlalchemy.url``), which
``nahida_workers.ledger.migrate`` fills from the settings, or from
``config/alembic.ini`` / ``-x url=...`` when alembic is run by hand.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from nahida_workers.ledger.schema import metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise RuntimeError("no database url: pass -x url=... or set sqlalchemy.url")
    return url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        # One transaction per revision, stamped as it commits: an interrupted
        # ``nahida migrate`` resumes at the last committed revision.
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(
            connection=conn, target_metadata=target_metadata, transaction_per_migration=True
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
