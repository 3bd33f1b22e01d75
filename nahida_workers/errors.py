"""One error root, three families (STYLE.md habit 4).

* :class:`UserError` -- the caller's mistake (bad job spec, unknown session,
  inbox full).  Never retried; shown to the person who made it.
* :class:`ToolError` -- what the model sees: a tool failed or was refused
  (path outside the workspace, invalid arguments, timeout).  It becomes an
  ``is_error`` tool result; the run goes on.
* :class:`RunError` -- run or infrastructure failures (provider, ledger,
  lease, broker).  Each carries ``retryable`` and ``retry_after`` (seconds),
  and a finite :class:`~nahida_workers.core.events.FailureCode` that is safe
  to store in the ledger (never a raw provider body or a credential).

Plus :class:`PayloadInvalid`: a request this package built breaks a
provider API rule (an unpaired tool call) -- a bug, never sent.

Three owners retry, each in exactly one place (STYLE.md habit 5):

1. **provider retries** -- ``providers/retry.py`` retries a provider call on
   429/5xx/timeouts with backoff, honouring ``Retry-After``;
2. **commit-point outage retries** -- ``runtime/commits/outage.py`` retries a fenced
   commit point (and the tool worker's epoch check) through a short ledger
   outage, never applying a commit twice (DESIGN.md section 3);
3. **Celery delivery retries** -- the ``run_session`` task re-publishes a
   delivery that failed with a retryable :class:`RunError`, and the broker
   redelivers a message whose worker died (acks_late, DESIGN.md section 4).

Everything else is reported, not retried in place.
"""

from __future__ import annotations

from typing import Any

from nahida_workers.core.events import FailureCode

__all__ = [
    "CallNotCommittedError",
    "ConfigError",
    "DuplicateResultError",
    "DuplicateSequenceError",
    "EventAfterTerminalError",
    "InboxFullError",
    "InvalidToolArgumentsError",
    "LeaseHeldError",
    "LeaseLostError",
    "LedgerDataError",
    "LedgerError",
    "LedgerIntegrityError",
    "LedgerUnavailableError",
    "NahidaError",
    "NotFoundError",
    "PathOutsideWorkspaceError",
    "PayloadInvalid",
    "ProviderError",
    "ProviderProtocolError",
    "RunError",
    "StaleEpochError",
    "StoredPayloadError",
    "ToolError",
    "ToolTimeoutError",
    "UserError",
    "WorkspaceUnavailableError",
    "WorktreeUnavailableError",
]


class NahidaError(Exception):
    """Root of every error this package raises on purpose."""


class PayloadInvalid(NahidaError, ValueError):
    """A request payload breaks a provider API rule; the message names the index and the rule.

    Raised before anything is sent (``providers/payloads.py``); also a
    ``ValueError`` for callers that treat it as bad data.
    """


# --- the caller's mistakes -------------------------------------------------


class UserError(NahidaError):
    """The caller asked for something invalid; fix the input and try again."""


class ConfigError(UserError):
    """A job spec, script or setting is malformed (message names the field)."""


class NotFoundError(UserError):
    """A session, run or batch id that the ledger does not hold."""


class InboxFullError(UserError):
    """The session inbox is at its message or byte limit (DESIGN.md section 8).

    Nothing was enqueued; the caller may retry after the session drains.
    """


class WorkspaceUnavailableError(UserError):
    """The session's workspace is not usable here: missing, not a directory, not git.

    Workspaces must be reachable by the worker that runs the session (one host,
    or a filesystem every worker mounts at the same path; DESIGN.md section 8).
    Raised before anything is created, so nothing is left behind.

    Attributes:
        code: ``workspace_missing`` (no such directory on this worker),
            ``not_a_git_repository`` (not inside a git working tree) or
            ``no_commits`` (the repository has no commit to base a worktree on).
    """

    code: str = "workspace_missing"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


# --- what the model sees -----------------------------------------------------


class ToolError(NahidaError):
    """A tool failed in a way the model should see and may correct.

    Attributes:
        code: short machine-readable code recorded in the receipt evidence
            (for example ``path_outside_workspace``).
    """

    code: str = "tool_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class PathOutsideWorkspaceError(ToolError):
    """A path resolves outside the session workspace (``..``, absolute, symlink)."""

    code = "path_outside_workspace"


class InvalidToolArgumentsError(ToolError):
    """Arguments are not valid JSON or do not match the tool's input schema."""

    code = "invalid_arguments"


class ToolTimeoutError(ToolError):
    """The tool ran past its timeout (seconds) and was stopped."""

    code = "timed_out"


# --- run and infrastructure failures ------------------------------------------


class RunError(NahidaError):
    """A failure of the run or of the infrastructure under it.

    Attributes:
        retryable: whether the same request may succeed if repeated.
        retry_after: seconds the server asked us to wait, if it said so.
        failure_code: the finite code stored in ``agent_runs.failure_code``.
    """

    failure_code: FailureCode = FailureCode.INTERNAL_ERROR
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after: float | None = None,
        failure_code: FailureCode | None = None,
    ) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after
        if failure_code is not None:
            self.failure_code = failure_code


class ProviderError(RunError):
    """The model provider refused or failed a request.

    ``status`` is the HTTP status when there was one (``None`` for connection
    errors and for the scripted provider).
    """

    failure_code = FailureCode.PROVIDER_ERROR

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        failure_code: FailureCode | None = None,
    ) -> None:
        super().__init__(
            message, retryable=retryable, retry_after=retry_after, failure_code=failure_code
        )
        self.status = status


class ProviderProtocolError(ProviderError):
    """The provider's response could not be understood (malformed stream).

    ``truncated`` marks a stream that simply stopped early (a transport
    failure, retried like one); any other protocol error gets one repair
    attempt (DESIGN.md section 6: "provider protocol invalid after one repair").
    """

    failure_code = FailureCode.PROVIDER_PROTOCOL_INVALID

    def __init__(self, message: str, *, truncated: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.truncated = truncated


class LedgerError(RunError):
    """Root of ledger refusals and ledger outages."""

    failure_code = FailureCode.LEDGER_WRITE_FAILED


class LedgerIntegrityError(LedgerError):
    """A write the ledger rules refuse (DESIGN.md section 2); never retryable."""


class DuplicateSequenceError(LedgerIntegrityError):
    """An event with this (run_id, sequence) is already committed."""


class CallNotCommittedError(LedgerIntegrityError):
    """A tool_result (or receipt) names a call whose tool_call is not committed."""


class DuplicateResultError(LedgerIntegrityError):
    """A second tool_result or a second tool_call for one call id."""


class EventAfterTerminalError(LedgerIntegrityError):
    """The run already holds its terminal event; nothing may follow it."""


class StaleEpochError(LedgerIntegrityError):
    """The writer's fencing epoch is not the session's current one (section 4).

    The writer lost its lease; it must stop without writing anything else.
    """

    failure_code = FailureCode.LEASE_LOST


class LedgerDataError(LedgerIntegrityError):
    """The database refused a value (too long, a NUL, bad encoding); never retryable.

    Not an outage: the same write fails the same way every time, so it must
    not be retried as if the database were down (DESIGN.md section 2).
    """


class StoredPayloadError(LedgerIntegrityError):
    """A stored event payload does not have its event type's shape (read edge).

    Raised when a ledger adapter reads a row (``core/event_payloads.py``,
    DESIGN.md section 2); the row is left as it is.
    """


class LedgerUnavailableError(LedgerError):
    """The database could not be reached or the transaction failed to commit."""

    retryable = True


class WorktreeUnavailableError(RunError):
    """A session's git worktree could not be created, even after the bounded retries.

    Raised by :mod:`nahida_workers.workspaces` after the transient git lock
    errors of case B22 were retried (at most ``worktree_retries`` times) or at
    once for a failure a retry cannot fix (the session's branch holds unrelated
    commits, its recorded base differs from the one asked for).  The session
    fails with reason ``worktree_unavailable``; any half-created branch that
    holds no work has been deleted.
    """

    failure_code = FailureCode.WORKTREE_UNAVAILABLE


class LeaseHeldError(RunError):
    """Another owner holds the session lease; this delivery must exit."""

    failure_code = FailureCode.LEASE_LOST


class LeaseLostError(RunError):
    """This owner's lease expired or was taken; it must stop writing at once.

    Attributes:
        reason: why the owner counts the lease as lost (a ``LeaseLoss`` value of
            ``core/handover.py``; empty when not known).
    """

    failure_code = FailureCode.LEASE_LOST

    def __init__(self, message: str, *, reason: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.reason = reason
