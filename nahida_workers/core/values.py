r"""Values from the model, the tools and job files, made storable everywhere (DESIGN.md section 2).

What SQLite accepts, PostgreSQL must accept: JSONB and TEXT refuse the NUL
character (``\\u0000``), psycopg cannot encode a lone surrogate (U+D800 to
U+DFFF), JSONB refuses ``NaN``, and ``VARCHAR(n)`` refuses a longer value.
Every value that reaches the ledger passes one of these functions -- in the
validators of the ledger's value types (``core/events.py``,
``core/records.py``) -- so the in-memory twin, SQLite and PostgreSQL store
the same thing and the run's state in memory equals what the ledger holds.

* text: a NUL or a lone surrogate becomes U+FFFD (the Unicode replacement
  character), wherever it is, dictionary keys included;
* an id longer than its column becomes ``<prefix>~<16 hex of sha256>`` -- the
  same input always gives the same id, and an id that fits is unchanged, so
  bounding twice is bounding once;
* a JSON value that is not JSON (a float NaN, bytes, a path ...) becomes its
  string form.

Tool calls are also *admitted* before their turn is committed
(``core/admission.py``).  Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

__all__ = [
    "MAX_ID_CHARS",
    "MAX_KEY_CHARS",
    "MAX_NAME_CHARS",
    "REPLACEMENT",
    "bounded_id",
    "clean_json",
    "clean_text",
    "is_clean",
]

#: Longest call id, tool name and inbox message id stored (``VARCHAR(200)``).
MAX_ID_CHARS = 200
#: Longest idempotency key stored (``VARCHAR(300)``).
MAX_KEY_CHARS = 300
#: Longest provider name stored (``VARCHAR(64)``).
MAX_NAME_CHARS = 64
#: What a NUL or a lone surrogate is replaced by.
REPLACEMENT = "\ufffd"

_BAD = re.compile("[\x00\ud800-\udfff]")
_HASH_CHARS = 16


def is_clean(text: str) -> bool:
    """True iff ``text`` holds no NUL and no lone surrogate."""
    if "\x00" in text:
        return False
    return text.isascii() or _BAD.search(text) is None


def clean_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return text if is_clean(text) else _BAD.sub(REPLACEMENT, text)


def clean_json(value: Any) -> Any:
    """A JSON value every backend stores the same way (see the module doc).

    Returns the same object when nothing needed cleaning (no copy).
    """
    return value if _is_clean_json(value) else _cleaned(value)


def _is_clean_json(value: Any) -> bool:
    if isinstance(value, str):
        return is_clean(value)
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and is_clean(k) and _is_clean_json(v) for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return all(_is_clean_json(item) for item in value)
    return False


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(item) for item in value]
    return clean_text(str(value))


def bounded_id(text: str, max_chars: int = MAX_ID_CHARS) -> str:
    """``text`` unchanged when it fits and is clean, else a stable bounded id.

    The bounded form keeps a readable (cleaned) prefix and ends with ``~`` and
    16 hex digits of the sha256 of the original (surrogates included), so two
    different ids never collide in practice and the same one always maps to
    the same id.  Idempotent: a bounded id is returned unchanged.
    """
    if len(text) <= max_chars and is_clean(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{clean_text(text)[: max_chars - _HASH_CHARS - 1]}~{digest}"
