"""Settings: one frozen object; config/env.example lists every field and default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from nahida_workers.settings import Settings, load_settings

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "env.example"


def _example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def test_env_example_lists_every_setting_with_its_default() -> None:
    example = _example()
    assert set(example) == {f"NAHIDA_{name.upper()}" for name in Settings.model_fields}
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        written = example[f"NAHIDA_{name.upper()}"]
        if default is None or hasattr(default, "get_secret_value"):
            assert written == ""
        elif isinstance(default, dict | list):
            assert json.loads(written) == default
        else:
            assert written == str(default), name


def test_settings_are_frozen_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAHIDA_LEASE_TTL_S", "12")
    monkeypatch.setenv("NAHIDA_ENV_FILE", "/dev/null")
    settings = load_settings()
    assert settings.lease_ttl_ms == 12_000
    assert settings.heartbeat_interval_s == 4.0
    with pytest.raises(ValidationError):
        settings.lease_ttl_s = 1  # type: ignore[misc]


def test_visibility_timeout_must_exceed_the_lease_ttl() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout_s"):
        Settings(lease_ttl_s=30, visibility_timeout_s=30, _env_file=None)  # type: ignore[call-arg]


def test_lease_key_is_the_design_key_with_the_prefix() -> None:
    settings = Settings(redis_key_prefix="p:", _env_file=None)  # type: ignore[call-arg]
    assert settings.lease_key("abc") == "p:lease:session:abc"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://",
        "postgresql+psycopg://postgres@127.0.0.1:5432",
        "postgresql://postgres@127.0.0.1/",
        "sqlite://",
    ],
)
def test_a_database_url_without_a_database_name_is_refused(url: str) -> None:
    # libpq fell back to the OS user's database: `migrate` created the ledger there.
    with pytest.raises(ValidationError, match="no database name"):
        Settings(database_url=url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg:///nahida",  # a Unix socket, database named
        "postgresql+psycopg://postgres@127.0.0.1:5432/nahida",
        "postgresql+psycopg://postgres@/?dbname=nahida&host=/run/postgresql",
        "sqlite:///var/nahida.sqlite3",
    ],
)
def test_a_database_url_with_a_database_name_is_accepted(url: str) -> None:
    assert Settings(database_url=url).database_url == url
