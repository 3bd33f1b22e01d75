"""The interpreter's verifier steps: record the base, start a verifier, adopt its verdict.

DESIGN.md section 6.  The pure loop decides (``core/verifier_steps.py``);
these perform each decision through a named commit point of
``runtime/commits/points.py``, one method per decision as in the driver.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from nahida_workers.core.events import ReasonCode, TerminalState
from nahida_workers.core.loop import Finish, final_text_for
from nahida_workers.core.verifier_steps import (
    AdoptVerdict,
    RecordBase,
    StartVerification,
    base_event,
    start_events,
    verdict_events,
)
from nahida_workers.runtime.children.spawn import completion_prefix
from nahida_workers.runtime.children.verifier import verifier_rows
from nahida_workers.workspaces.diff import head_commit

if TYPE_CHECKING:
    from nahida_workers.runtime.ownership.driver import RunDriver

__all__ = ["apply_verifier_step"]

log = logging.getLogger(__name__)


def apply_verifier_step(
    driver: RunDriver, decision: RecordBase | StartVerification | AdoptVerdict
) -> bool:
    """Perform one verifier decision; False when the run needs nothing more from this owner."""
    match decision:
        case RecordBase():
            return _record_base(driver)
        case StartVerification():
            return _start(driver, decision)
        case AdoptVerdict():
            return _adopt(driver, decision)
        case unreachable:
            assert_never(unreachable)


def _record_base(driver: RunDriver) -> bool:
    """The workspace's commit before the session's first change (None: not a git repository)."""
    commit = head_commit(Path(driver.session.workspace))
    event = base_event(driver.state, commit, now=driver.r.clock.now())
    driver.commits.commit_control(driver.state, [event])
    return True


def _start(driver: RunDriver, start: StartVerification) -> bool:
    """The verifier child and its ``verifier_started`` event in one commit; then park on it."""
    family = driver.commits.family
    if family is None:  # the owner gives every session that may verify a family
        log.error("run %s: a verifier is needed but there is no child port", driver.run.run_id)
        state, reason = TerminalState.UNVERIFIED, ReasonCode.VERIFIER_REJECTED
        finish = Finish(state, reason, final_text_for(state, reason))
        driver.commits.seal(driver.state, driver.run, finish)
        return False
    now = driver.r.clock.now()
    child, rows = verifier_rows(
        family.spawner, driver.state, start, workspace=driver.session.workspace, now=now
    )
    events = start_events(driver.state, start, child, now=now)
    driver.commits.start_verifier(driver.state, events, rows)
    return True


def _adopt(driver: RunDriver, adopt: AdoptVerdict) -> bool:
    """The verdict, parsed strictly, and a goal's transition; the completion is claimed."""
    now = driver.r.clock.now()
    events = verdict_events(driver.state, adopt, now=now, objective=driver.spec.goal)
    prefix = completion_prefix(adopt.start.child)
    claims = [m.message_id for m in driver.pending_inbox() if m.message_id.startswith(prefix)]
    driver.commits.commit_control(driver.state, events, claims=claims)
    return True
