"""The completion pipeline (DESIGN.md section 6): is a no-tool answer a completion?

An answer with no tool call is a *candidate*, not a completion.  Each stage
is a pure policy returning an action value; the loop persists, then acts.
"""

from nahida_workers.core.policy.actions import (
    Accept,
    CandidateContext,
    ContinueWithInbox,
    Correct,
    PolicyAction,
    PolicyLimits,
    RunStopHooks,
    Settle,
    Stage,
    StartVerifier,
    corrections_by,
    schema_digest,
)
from nahida_workers.core.policy.stages import (
    DEFAULT_STAGES,
    STRUCTURED_OUTPUT_TOOL,
    evaluate_candidate,
)

__all__ = [
    "DEFAULT_STAGES",
    "STRUCTURED_OUTPUT_TOOL",
    "Accept",
    "CandidateContext",
    "ContinueWithInbox",
    "Correct",
    "PolicyAction",
    "PolicyLimits",
    "RunStopHooks",
    "Settle",
    "Stage",
    "StartVerifier",
    "corrections_by",
    "evaluate_candidate",
    "schema_digest",
]
