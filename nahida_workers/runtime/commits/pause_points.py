"""A test-only pause at a named commit point, so a crash test can kill there.

Inert by default.  A real-process crash test (``tests/integration/
test_children_crash.py``) sets ``NAHIDA_TEST_PAUSE_AFTER=<point>`` in a
worker's environment; the owner that reaches that point logs
``test pause after <point>`` and sleeps ``NAHIDA_TEST_PAUSE_S`` seconds
(default 60; the log may show the point name redacted, being a
``NAHIDA_*`` value) -- its lease heartbeat keeps running -- while the test SIGKILLs
it.  The points: ``commit_turn`` (a turn with Task calls has committed its
children, DESIGN.md section 8, and published them; the owner has not parked
yet), ``start_verifier`` (a verifier child and its ``verifier_started``
event are committed and published, section 6; the owner has not parked
yet) and ``team_claim`` (a team member has read the graph and not yet tried
its claim: members that claim within the pause race for the same task,
``tests/integration/test_team_refactor.py``).  Never set in production.
"""

from __future__ import annotations

import logging
import os
import time

from nahida_workers.worker_secrets import lookup

__all__ = ["PAUSE_ENV", "pause_point"]

log = logging.getLogger(__name__)

#: The environment variable naming the point to pause after (test-only).
PAUSE_ENV = "NAHIDA_TEST_PAUSE_AFTER"


def pause_point(name: str) -> None:
    """Sleep here when ``NAHIDA_TEST_PAUSE_AFTER`` names ``name``; otherwise return at once."""
    # A worker moves every NAHIDA_* variable out of os.environ at start
    # (worker_secrets.py): read it where it is held.
    if lookup(PAUSE_ENV) != name:
        return
    seconds = float(lookup("NAHIDA_TEST_PAUSE_S") or "60")
    log.warning("test pause after %s (pid %d) for %.1f s", name, os.getpid(), seconds)
    time.sleep(seconds)
