"""A worker keeps its secrets in memory; stored text has credentials masked (issue 11 item 7)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nahida_workers.worker_secrets import SecretStore, is_secret, redact

PASSWORD = "PlantedPw4242"
DB_URL = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432/nahida"


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        (f"url {DB_URL}", PASSWORD),
        ("redis://:brokerpw99@127.0.0.1:6379/0", "brokerpw99"),
        ("groq gsk_0123456789abcdefGHIJ", "gsk_0123456789abcdefGHIJ"),
        ("hf hf_abcdefghijklmnopqrstuv", "hf_abcdefghijklmnopqrstuv"),
        ("short sk-abc12345", "sk-abc12345"),
        ("curl -H 'Authorization: Bearer tok3n.value'", "tok3n.value"),
        ("header Bearer abcdef1234", "abcdef1234"),
        ("OPENAI_API_KEY=whatever-it-is", "whatever-it-is"),
        ("MY_DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
        ("curl -H 'x-api-key: proxyKey123456'", "proxyKey123456"),  # Anthropic's header
        ("> authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("AUTHORIZATION: token tok987654321", "tok987654321"),
        ("api-key: azureKey0987654", "azureKey0987654"),
        # lower-case env and shell lines (an .env file, `set`, `export -p`)
        ("openai_api_key=plainValue123", "plainValue123"),
        ("x\nexport aws_secret_access_key=wJalrXUtnFEMI/K7MDENG\n", "wJalrXUtnFEMI/K7MDENG"),
        ("    export github_token=ghtok12345", "ghtok12345"),
        ("declare -x db_password=hunter2hunter2", "hunter2hunter2"),
        ("Db-Password=mixedCase99", "mixedCase99"),
        # JSON, Python reprs and YAML values under a secret name
        ('{"api_key": "abc123", "n": 1}', "abc123"),
        ('{"password":"p@ss:w/rd"}', "p@ss:w/rd"),
        ('"token": "t0k3n-value"', "t0k3n-value"),
        ('{"client_secret": "cs-9a8b7c"}', "cs-9a8b7c"),
        ('{"refresh_token": "esc\\"aped"}', 'esc\\"aped'),
        ("{'password': 'reprPass1', 'user': 'bob'}", "reprPass1"),
        ("api_key: abcd1234efgh", "abcd1234efgh"),
        ("db:\n  password: 'quotedYamlPw'\n", "quotedYamlPw"),
        ('  - client_secret: "listItemSecret"', "listItemSecret"),
        ("secret_key: 0123456789abcdef  # prod", "0123456789abcdef"),
        # URLs with credentials, bearer tokens in any case
        ("postgresql://user:pass1234@db.internal:5432/app", "pass1234"),
        ("amqp://guest:p@ss@broker/", "p@ss"),
        ("BEARER abcdef1234", "abcdef1234"),
        ("auth: bEaReR abcdef1234", "abcdef1234"),
    ],
)
def test_redaction_masks_every_common_credential_shape(text: str, hidden: str) -> None:
    masked = redact(text)
    assert hidden not in masked and "[REDACTED]" in masked


@pytest.mark.parametrize(
    "text",
    [
        "risk-assessment-team", "def f(api_key=None):", "basic functionality", "token validation",
        "the token is passed in a header; rotate the password: monthly",
        "Note: the api key is read at start",
        "def connect(password=None, token=None):",
        "client = Client(\n    api_key=api_key,\n    token=token,\n)",
        "token: str", "    api_key: Optional[str] = None", "password: SecretStr",
        "    password: str = Field(min_length=8)",
        '{"max_tokens": 4096, "token": null, "api_key": ""}', "max_tokens: 4096000000",
        '"token_count": "12345678"', "cache_key: abcdefgh12345", "sort_key=created_at_2024",
        "PWD=/home/user", "monkey=banana",
        "ssh://git@github.com/o/r.git", "http://localhost:8080/v1@latest",
    ],
)  # fmt: skip
def test_redaction_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_names_values_and_quotes_are_kept() -> None:
    assert redact('{"api_key": "abc123"}') == '{"api_key": "[REDACTED]"}'
    assert redact("db:\n  password: 'pw'\n") == "db:\n  password: '[REDACTED]'\n"
    assert redact("export aws_secret_access_key=x1") == "export aws_secret_access_key=[REDACTED]"
    assert redact("pg://u:p@h/d") == "pg://u:[REDACTED]@h/d"


def test_held_values_are_masked_whatever_their_shape() -> None:
    store = SecretStore()
    store.add({"LLM": "no-known-shape-at-all", "SHORT": "abc"})
    assert store.mask("x no-known-shape-at-all y abc") == "x [REDACTED] y abc"


def test_what_counts_as_a_secret() -> None:
    assert is_secret("NAHIDA_DATABASE_URL", "sqlite:///x")
    assert is_secret("OPENAI_API_KEY", "x") and is_secret("GH_TOKEN", "x")
    assert is_secret("WHATEVER", "sk-proj-abcdefgh123") and is_secret("DSN_X", "x")
    assert is_secret("UPSTREAM", "https://user:pw@host/")
    assert not is_secret("PATH", "/usr/bin") and not is_secret("LANG", "C.UTF-8")
    assert not is_secret("HTTP_PROXY", "http://proxy:3128")


_SCRUB = """
import os, subprocess
from nahida_workers.settings import load_settings
from nahida_workers.worker_secrets import lookup, scrub_process_environment
before = load_settings().database_url
taken = scrub_process_environment()
out = subprocess.run(
    ["/bin/bash", "-c", "tr '\\\\0' '\\\\n' < /proc/$PPID/environ; env"],
    capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
).stdout
print("LEAK" if "PlantedPw4242" in out or "planted-llm-key" in out else "CLEAN")
print(load_settings().database_url == before, lookup("MY_LLM_KEY"), sorted(taken))
print("PATH" in os.environ, "NAHIDA_DATABASE_URL" in os.environ)
"""


def test_a_child_cannot_read_the_secrets_from_its_parents_environ() -> None:
    env = {
        **os.environ,
        "NAHIDA_DATABASE_URL": DB_URL,
        "NAHIDA_ENV_FILE": "/dev/null",
        "MY_LLM_KEY": "planted-llm-key",
    }
    done = subprocess.run(
        [sys.executable, "-c", _SCRUB], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    verdict, settings_line, env_line = done.stdout.splitlines()
    assert verdict == "CLEAN"
    assert settings_line.startswith("True planted-llm-key")
    assert "MY_LLM_KEY" in settings_line and "NAHIDA_DATABASE_URL" in settings_line
    assert env_line == "True False"


def _redact_everything(text: str) -> str:
    """What :func:`redact` must equal: every pattern applied, no shortcut."""
    from nahida_workers import worker_secrets as ws

    text = ws._store.mask(text)
    text = ws._KEY_SHAPES.sub(ws._MASK, text)
    text = ws._URL_PASSWORD.sub(rf"\g<1>{ws._MASK}\g<2>", text)
    text = ws._ENV_ASSIGNMENT.sub(rf"\g<1>={ws._MASK}", text)
    text = ws._HEADER.sub(rf"\g<1>: {ws._MASK}", text)
    text = ws._ENV_LINE.sub(rf"\g<1>={ws._MASK}", text)
    text = ws._QUOTED_VALUE.sub(rf"\g<1>\g<2>\g<1>\g<3>\g<4>{ws._MASK}\g<4>", text)
    return ws._YAML_VALUE.sub(ws._yaml_mask, text)


_PIECES = [
    "sk-", "sk-ant-", "gsk_", "hf_", "glpat-", "AKIA", "xoxb-", "ghp_", "Bearer ", "bearer\t",
    "Authorization: ", "AUTHORIZATION:", "x-api-key:", "Api-Key: ", "Basic ",
    "://", "user:", "@", "=", "API_KEY", "PASSWORD",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "abcdefghijklmnopqrstuvwxyz0123456789", "ABCDEFGHIJKLMNOP",
    " ", "\n", "_", "-", ":", "é", "ok",
    "BEARER ", "bEaReR ", "openai_api_key", "export ", "aws_secret_access_key", "Token",
    "password", "client_secret", '"', "'", '"api_key"', "'password'", ": ", ":\t", "  - ",
    "12345678", "# c", "\\", "{", "[", "max_tokens", "KEY", "Secret",
    "pa\u017f\u017fword", "\u212aey",  # a long s and the Kelvin sign fold to s and k
]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), max_size=14))
@settings(max_examples=400, deadline=None)
def test_the_redaction_shortcut_never_skips_a_match(parts: list[str]) -> None:
    """Issue 15: the cheap pre-check only skips text no pattern can match."""
    text = "".join(parts)
    assert redact(text) == _redact_everything(text)
