"""The console's Jinja2 environment: templates from ``web/templates/``, autoescaped, with filters.

Templates live in files beside this module (package data), not in Python.
Every value is escaped by Jinja; nothing is marked safe but the SVG
timeline, which :mod:`nahida_workers.web.timeline` builds from escaped parts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

__all__ = ["HERE", "SYMBOLS", "console_environment"]

HERE = Path(__file__).resolve().parent

#: The symbol beside each state's word, so a state reads without colour too.
SYMBOLS = {
    "completed": "✓",
    "failed": "✗",
    "cancelled": "⊘",
    "incomplete": "◐",
    "unverified": "?",
    "queued": "…",
    "running": "▶",
    "waiting": "‖",
    "done": "■",
    "paused": "‖",
    "active": "▶",
    "dispatched": "▶",
    "dispatching": "…",
    "skipped_overlap": "↷",
    "buffered": "…",
    "failed_dispatch": "✗",
    "pending": "…",
    "claimed": "▶",
    "acknowledged": "✓",
    "ok": "✓",
    "error": "✗",
    "timed_out": "⧗",
    "interrupted": "↯",
    "unknown": "?",
}


def stamp(value: datetime | None) -> str:
    """``2026-12-01 18:43:58`` (UTC), or ``-``: plain text, for attributes."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def when(value: datetime | None) -> Markup | str:
    """``<time datetime="...">2026-12-01 18:43:58</time>`` (UTC), or ``-``."""
    if value is None:
        return "-"
    at = value.astimezone(UTC)
    return Markup('<time datetime="{}">{}</time>').format(at.isoformat(), stamp(at))


def seconds(value: float | None) -> str:
    """A duration in words: ``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 4 min``."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{int(value // 60)} min {int(value % 60)} s"
    return f"{int(value // 3600)} h {int(value % 3600 // 60)} min"


def until(value: float) -> str:
    """Time to an event, in whole minutes (``under a minute``, ``42 min``, ``8 h 9 min``).

    Coarse on purpose: a live region holding it changes once a minute, not every second.
    """
    if value < 60:
        return "under a minute"
    minutes = int(value // 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def query(params: dict[str, str], **changes: object) -> str:
    """``?a=1&page=2``: ``params`` with ``changes`` applied (empty values dropped)."""
    merged = {**params, **{k: str(v) for k, v in changes.items()}}
    kept = {k: v for k, v in merged.items() if v not in ("", "None")}
    return "?" + urlencode(kept) if kept else "?"


def console_environment() -> Environment:
    """The environment every console page renders with."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["stamp"] = stamp
    env.filters["until"] = until
    env.filters["seconds"] = seconds
    env.globals["query"] = query
    env.globals["SYMBOLS"] = SYMBOLS
    # The macros are a global, so a block rendered alone (the live stream) has them too.
    env.globals["m"] = env.get_template("_macros.html").module
    return env
