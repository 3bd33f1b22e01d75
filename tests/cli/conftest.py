"""The CLI tests share the integration fixtures (real worker processes, the emptied ledger)."""

from tests.integration.conftest import fleet, pg

__all__ = ["fleet", "pg"]
