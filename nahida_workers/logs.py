"""Worker logs that say which session, run and trace each line belongs to.

The session runner binds the ids of the run it is driving
(:func:`bind_log_context`, a context variable: per thread, per task), and
every Celery task starts and ends with none bound (:func:`clear_log_context`
on ``task_prerun`` and ``task_postrun``, ``celery/app.py``): a pool thread
reused by the next task -- a ``schedule_tick`` after a session -- never
carries the previous task's ids; a
:class:`ContextFilter` on every handler copies them onto each record, and
``NAHIDA_LOG_FORMAT=json`` swaps the formatter for :class:`JsonFormatter`
(one JSON object per line).  The text format appends ``[session=... run=...
trace=...]`` when a line belongs to one.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime

__all__ = [
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "bind_log_context",
    "clear_log_context",
    "configure_logging",
]

#: The ids of what this thread (or task) is working on.
_CONTEXT: ContextVar[dict[str, str | None] | None] = ContextVar("nahida_log_context", default=None)
IDS = ("session_id", "run_id", "trace_id")


def bind_log_context(**ids: str | None) -> None:
    """Set the ids later log lines of this thread/task carry; None clears one.

    Call it when a task starts (session id) and when a run starts (run id and
    trace id); a new task's binding replaces the previous task's.
    """
    current = dict(_CONTEXT.get() or {})
    current.update(ids)
    _CONTEXT.set(current)


def clear_log_context() -> None:
    """Unbind every id of this thread/task (a task boundary: nothing carries over)."""
    _CONTEXT.set(None)


class ContextFilter(logging.Filter):
    """Copies the bound ids onto every record (``record.session_id`` ...; None when unbound)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp the record with the current session, run and trace ids; keep it."""
        context = _CONTEXT.get() or {}
        for key in IDS:
            if getattr(record, key, None) is None:
                setattr(record, key, context.get(key))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, session_id, run_id, trace_id.

    A record with a ``request`` mapping (``nahida serve``'s request lines)
    carries it as the ``request`` member.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line."""
        data = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **{key: getattr(record, key, None) for key in IDS},
            "process": record.process,
            "thread": record.threadName,
        }
        request = getattr(record, "request", None)
        if isinstance(request, dict):  # an HTTP request line (api/access_log.py)
            data["request"] = request
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The usual text line, with ``[session=... run=... trace=...]`` when bound."""

    def __init__(self) -> None:
        super().__init__("[%(asctime)s: %(levelname)s/%(processName)s] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line."""
        line = super().format(record)
        ids = " ".join(
            f"{key.removesuffix('_id')}={getattr(record, key)}"
            for key in IDS
            if getattr(record, key, None)
        )
        return f"{line} [{ids}]" if ids else line


def configure_logging(log_format: str, logger: logging.Logger | None = None) -> None:
    """Give every handler of ``logger`` (default: root) the context filter and the format."""
    target = logger or logging.getLogger()
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    for handler in target.handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        handler.setFormatter(formatter)
