"""Case B15: no session task blocks on another task (DESIGN.md section 8).

A task that waits for another task's result (``AsyncResult.get()``,
``GroupResult.join()``, ``allow_join_result()``) holds its worker slot while
the task it waits for may need that very slot.  Parents park instead; this
scan keeps the package and ``tasks/`` free of Celery result joins.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Celery's result classes, and ``.get()`` / ``.join()`` on a sent task or with Celery's kwargs.
BANNED = re.compile(
    r"\b(AsyncResult|GroupResult|ResultSet|allow_join_result)\b"
    r"|\bjoin_native\("
    r"|\.(delay|apply_async)\(.*\)\s*\.(get|join|wait)\("
    r"|\.(get|join|wait)\(.*\b(propagate|disable_sync_subtasks)\s*="
)


def offending_lines(folders: tuple[str, ...] = ("nahida_workers", "tasks")) -> list[str]:
    """``path:line: text`` of every line using a blocking Celery result API."""
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
                if BANNED.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_no_session_task_joins_a_celery_result() -> None:
    assert offending_lines() == []


def test_the_scan_finds_each_blocking_form() -> None:
    for line in (
        "r = AsyncResult(task_id)",
        "GroupResult.restore(gid).join()",
        "with allow_join_result():",
        "run_session.delay(sid).get()",
        "res.get(timeout=10, propagate=False)",
        "group.join(disable_sync_subtasks=False)",
        "x.apply_async(args=[1]).wait(",
    ):
        assert BANNED.search(line), line
    assert not BANNED.search('", ".join(names)')
    assert not BANNED.search("settings.get('x')")
    assert not BANNED.search("self._thread.join(timeout=1)")  # threads are not task results
