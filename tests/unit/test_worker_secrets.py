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
    ],
)
def test_redaction_masks_every_common_credential_shape(text: str, hidden: str) -> None:
    masked = redact(text)
    assert hidden not in masked and "[REDACTED]" in masked


@pytest.mark.parametrize(
    "text",
    ["risk-assessment-team", "def f(api_key=None):", "basic functionality", "token validation"],
)
def test_redaction_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


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
    return ws._HEADER.sub(rf"\g<1>: {ws._MASK}", text)


_PIECES = [
    "sk-", "sk-ant-", "gsk_", "hf_", "glpat-", "AKIA", "xoxb-", "ghp_", "Bearer ", "bearer\t",
    "Authorization: ", "AUTHORIZATION:", "x-api-key:", "Api-Key: ", "Basic ",
    "://", "user:", "@", "=", "API_KEY", "PASSWORD",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "abcdefghijklmnopqrstuvwxyz0123456789", "ABCDEFGHIJKLMNOP",
    " ", "\n", "_", "-", ":", "é", "ok",
]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), max_size=14))
@settings(max_examples=400, deadline=None)
def test_the_redaction_shortcut_never_skips_a_match(parts: list[str]) -> None:
    """Issue 15: the cheap pre-check only skips text no pattern can match."""
    text = "".join(parts)
    assert redact(text) == _redact_everything(text)
