r"""The worker's secrets live in its memory, not in its environment.

Bash gets a scrubbed environment, but a command can read its parent's:
``tr '\\0' '\\n' < /proc/$PPID/environ`` printed the provider key and the
database URL with its password, which then went to the model, the ledger and
the batch report.  Removing a variable from ``os.environ`` does not help:
``/proc/PID/environ`` shows the environment block the process was *started*
with, which lives in its own memory.  So, once, when a worker starts:

1. every variable is copied into memory;
2. the secret ones -- ``NAHIDA_*``, names that say KEY, TOKEN, SECRET,
   PASSWORD, CREDENTIAL or AUTH, values shaped like a key or a URL with a
   password -- are taken out of ``os.environ`` and kept in a process-wide
   :class:`SecretStore` (settings and provider keys are looked up there);
3. the rest is re-homed (set again, so the C library holds its own copies)
   and the original block is overwritten with zeros: ``/proc/PID/environ``
   of the worker then reads as nothing at all.

What remains (docs/jobs/tools.md): Bash runs as the worker's
user, so it can read any file that user can (an env file included), and the
environment of processes that started the worker.  Known secret values are
also masked wherever the ledger stores text (:func:`redact_known`), and
:func:`redact` masks credential shapes (keys, headers, URL passwords, values
under a secret name in env, JSON and YAML lines) in every tool result.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping

__all__ = [
    "SecretStore",
    "held",
    "is_secret",
    "lookup",
    "redact",
    "redact_known",
    "scrub_process_environment",
]

log = logging.getLogger(__name__)

_SECRET_NAME = re.compile(
    r"(?:KEY|TOKEN|SECRET|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION_ID|DSN)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(?:^(?:sk-|sk_|gsk_|hf_|xox[abpr]-|gh[pousr]_|glpat-|AKIA)[A-Za-z0-9_\-]{8,}"
    r"|://[^/\s:@]*:[^/\s@]+@)"
)
#: Variables a worker and its libraries keep needing (locale, paths, proxies, CA files).
_KEEP = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR", "PWD", "TERM"}
)
#: Secret values shorter than this are not masked in stored text (too many false hits).
_MIN_MASKED = 8


def is_secret(name: str, value: str) -> bool:
    """Whether an environment variable holds a secret (see the module doc)."""
    if name in _KEEP or name.startswith("LC_"):
        return False
    if name.startswith("NAHIDA_"):
        return True
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value))


class SecretStore:
    """Secrets taken out of the environment, by variable name (thread-safe)."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Mapping[str, str]) -> None:
        """Hold ``values`` (name -> value)."""
        with self._lock:
            self._values.update(values)
            masked = sorted(
                {v for v in self._values.values() if len(v) >= _MIN_MASKED}, key=len, reverse=True
            )
            self._pattern = re.compile("|".join(map(re.escape, masked))) if masked else None

    def get(self, name: str) -> str | None:
        """The held value of variable ``name``, or None."""
        with self._lock:
            return self._values.get(name)

    def items(self) -> dict[str, str]:
        """A copy of everything held."""
        with self._lock:
            return dict(self._values)

    def mask(self, text: str) -> str:
        """``text`` with every held value of 8+ characters replaced by ``[REDACTED]``."""
        pattern = self._pattern
        return text if pattern is None else pattern.sub("[REDACTED]", text)


_store = SecretStore()
_scrubbed = threading.Event()


def lookup(name: str) -> str | None:
    """A variable's value: from the secret store, else from ``os.environ``."""
    return _store.get(name) or os.environ.get(name)


def held() -> dict[str, str]:
    """The variables taken out of the environment at worker start (name -> value)."""
    return _store.items()


def redact_known(text: str) -> str:
    """``text`` with the values of held secrets masked."""
    return _store.mask(text)


_MASK = "[REDACTED]"
_KEY_SHAPES = re.compile(
    r"(?:\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{8,}"  # OpenAI / Anthropic keys, short ones too
    r"|\bgsk_[A-Za-z0-9]{16,}"  # Groq
    r"|\bhf_[A-Za-z0-9]{16,}"  # Hugging Face
    r"|\bglpat-[A-Za-z0-9_\-]{16,}"  # GitLab
    r"|\bAuthorization:[ \t]*\S+[ \t]+\S+"  # Authorization headers, any scheme
    r"|\b(?ai:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"  # bearer tokens, any letter case
    r"|\bAKIA[0-9A-Z]{16}"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|\bxox[abpr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)"
)
#: ``scheme://user:PASSWORD@host`` -- a database or broker URL with its password (up to
#: the authority's last ``@``: a password with an unencoded ``@`` is masked whole).
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s]*[^/\s@](@)")
#: ``SOME_API_KEY=value`` -- an environment dump line (upper-case names, as env vars are).
_ENV_ASSIGNMENT = re.compile(
    r"\b([A-Z_][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?)"
    r"[A-Z0-9_]*)=(\S+)"
)

#: ``x-api-key: value``, ``authorization: Basic value`` -- credential headers in any
#: letter case (HTTP header names are case-insensitive); the name is kept.
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token):[ \t]*"
    r"(?:(?:basic|bearer|token|digest)[ \t]+)?[^\s'\"]+"
)
_HEADER_HINTS = ("authorization:", "api-key:", "auth-token:")

#: A name that says it holds a secret, in any letter case, as the *whole* name or
#: its last part: ``openai_api_key``, ``aws_secret_access_key``, ``client_secret``,
#: ``db-password``, ``github_token``.  ``max_tokens``, ``token_count``, ``cache_key``
#: and ``pwd`` are not secret names.
_NAMED = (
    r"(?<![A-Za-z0-9_.\-])(?:[A-Za-z0-9]+[_.\-])*"
    r"(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?(?:access[_-]?)?key|private[_-]?key"
    r"|auth[_-]?key|client[_-]?secret|secret|password|passwd|passphrase|credentials?"
    r"|(?:access[_-]?|refresh[_-]?|auth[_-]?|id[_-]?|api[_-]?|bearer[_-]?)?token)"
)
#: ``openai_api_key=sk-...``, ``export aws_secret_access_key=...`` -- an env file or shell
#: line in any letter case (``export -p`` prints ``declare -x name="value"``).  Only at
#: the start of a line (``export`` may be indented):
#: ``def f(api_key=None)`` and indented keyword arguments are code, not assignments.
_ENV_LINE = re.compile(rf"(?aim)^((?:[ \t]*(?:export|declare[ \t]+-[a-z]+)[ \t]+)?{_NAMED})=\S+")
#: ``"api_key": "..."``, ``'password': '...'`` -- a JSON (or Python repr) string value
#: under a secret name; other value types (numbers, null, variables) are left alone.
_QUOTED_VALUE = re.compile(
    rf"(?ai)([\"'])({_NAMED})\1([ \t]*:[ \t]*)([\"'])(?:(?!\4)[^\\\n]|\\.)+\4"
)
#: ``api_key: value`` -- a YAML line: a quoted value, or a bare one of 8+ characters with a
#: digit and no brackets (so ``token: str`` and ``api_key: Optional[str] = None``, type
#: annotations, stay as they are).
_YAML_VALUE = re.compile(
    rf"(?aim)^([ \t]*(?:-[ \t]+)?{_NAMED}[ \t]*:[ \t]+)"
    r"(?:([\"'])(?:(?!\2)[^\n])+\2"
    r"|(?=[^\s#]*[0-9])[^\s#'\"\[\](){},=]{8,}(?=[ \t]*(?:#|$)))"
)
#: Lower-case substrings without which no secret name can match.  The patterns are ASCII
#: (``(?a)``): with Unicode case folding a long s (U+017F) matches ``s``, so
#: ``pa\u017f\u017fword`` would match ``password`` while ``str.lower()`` keeps the
#: long s, and the shortcut would skip a match.
_NAME_HINTS = ("key", "token", "secret", "passw", "passphrase", "credential")


#: Substrings without which a pattern cannot match: plain ``in`` tests (fast)
#: spare the regexes almost all text.
_KEY_HINTS = (
    "sk-", "gsk_", "hf_", "glpat-", "AKIA", "xox", "PRIVATE KEY", "earer", "Authorization:",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
)  # fmt: skip
_ENV_HINTS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL")


def redact(text: str) -> str:
    """Mask credentials in ``text``: key shapes, URL passwords, ``*_KEY=`` values, held values.

    Also the value under a secret name (``_NAMED``) in an env or shell line
    (``openai_api_key=...``, ``export aws_secret_access_key=...``), a JSON or
    Python-repr string (``"api_key": "..."``) and a YAML line (``password:
    ...``).  Used wherever text is stored or shown to the model (the ledger's
    payload walk, every tool result).  Masks with ``[REDACTED]``; the user and
    host of a URL and every name are kept.
    """
    text = _store.mask(text)
    # Every pattern needs one of these (see _KEY_SHAPES, _URL_PASSWORD,
    # _ENV_ASSIGNMENT): six substring tests spare almost all stored text the
    # hint loops below (redaction runs on every payload string: a hot path).
    if (
        "-" not in text
        and "_" not in text
        and ":" not in text
        and "=" not in text
        and "AKIA" not in text
        and "earer" not in text.lower()  # last: only text that passed every other test
    ):
        return text
    lowered = text.lower()
    if "bearer" in lowered or any(hint in text for hint in _KEY_HINTS):
        text = _KEY_SHAPES.sub(_MASK, text)
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(rf"\g<1>{_MASK}\g<2>", text)
    if "=" in text and any(hint in text for hint in _ENV_HINTS):
        text = _ENV_ASSIGNMENT.sub(rf"\g<1>={_MASK}", text)
    if ":" in text and any(hint in lowered for hint in _HEADER_HINTS):
        text = _HEADER.sub(rf"\g<1>: {_MASK}", text)
    if any(hint in lowered for hint in _NAME_HINTS):
        text = _redact_named(text)
    return text


def _yaml_mask(match: re.Match[str]) -> str:
    quote = match.group(2) or ""
    return f"{match.group(1)}{quote}{_MASK}{quote}"


def _redact_named(text: str) -> str:
    """Mask values under secret names: env lines, JSON / repr strings, YAML lines."""
    if "=" in text:
        text = _ENV_LINE.sub(rf"\g<1>={_MASK}", text)
    if ":" in text:
        text = _QUOTED_VALUE.sub(rf"\g<1>\g<2>\g<1>\g<3>\g<4>{_MASK}\g<4>", text)
        text = _YAML_VALUE.sub(_yaml_mask, text)
    return text


def scrub_process_environment(*, wipe: bool = True) -> list[str]:
    """Move secrets out of ``os.environ`` and blank the process's original env block.

    Call once, when a worker process starts, after its settings are loaded
    (``load_settings`` also reads the held ``NAHIDA_*`` values).  Safe to
    call again (only what is still in ``os.environ`` is looked at).

    Args:
        wipe: overwrite the original environment block (Linux ``/proc``).

    Returns:
        The names of the variables taken out.
    """
    current = dict(os.environ)
    secret = {k: v for k, v in current.items() if is_secret(k, v)}
    _store.add(secret)
    for name in secret:
        os.environ.pop(name, None)
    if wipe and not _scrubbed.is_set():
        _wipe_original_block({k: v for k, v in current.items() if k not in secret})
        _scrubbed.set()
    if secret:
        log.info("secrets moved out of the environment: %s", ", ".join(sorted(secret)))
    return sorted(secret)


def _wipe_original_block(keep: Mapping[str, str]) -> None:
    """Re-home ``keep`` in the C library's own memory, then zero the block ``/proc`` shows."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
    except (OSError, ValueError, IndexError):
        log.warning("cannot locate the environment block; /proc/self/environ left as is")
        return
    if not 0 < start < end or end - start > 1 << 24:
        return
    import ctypes  # here: the CLI imports this module and never wipes (CLI start-up budget)

    os.environ.clear()  # unsetenv every name: nothing points into the old block any more
    for name, value in keep.items():
        os.environ[name] = value  # setenv copies name and value
    ctypes.memset(start, 0, end - start)
