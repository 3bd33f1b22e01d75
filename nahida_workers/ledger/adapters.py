"""One adapter of each kind per ledger object: the composition the ledger's ports share.

The child-session, team, control-fact and memory adapters each wrap the
ledger they write through; the memory twins keep their own rows in the
adapter, so every caller must get the same adapter for one ledger.
:func:`adapter_of` hands it out (a weak cache: an adapter lives as long as
its ledger).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["adapter_of"]

_adapters: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def adapter_of(
    ledger: Any,
    what: str,
    memory: Callable[[Any], Any],
    sql: Callable[[Any], Any],
) -> Any:
    """The ``what`` adapter of ``ledger``: made once by ``memory`` or ``sql``, then reused.

    Raises:
        TypeError: ``ledger`` is neither a ``MemoryLedger`` nor a ``SqlLedger``
            (the message names ``what``).
    """
    from nahida_workers.ledger.memory import MemoryLedger
    from nahida_workers.ledger.sql import SqlLedger

    with _lock:
        kinds = _adapters.setdefault(ledger, {})
        found = kinds.get(what)
        if found is None:
            if isinstance(ledger, MemoryLedger):
                found = memory(ledger)
            elif isinstance(ledger, SqlLedger):
                found = sql(ledger)
            else:
                raise TypeError(f"no {what} adapter for {type(ledger).__name__}")
            kinds[what] = found
        return found
