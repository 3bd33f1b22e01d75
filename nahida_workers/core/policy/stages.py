"""The completion stages, in DESIGN.md section 6 order.

pending steering -> no tool calling -> structured output ->
incomplete intent -> delegation contract -> independent verification ->
explicit verification -> stop hooks -> goal verification -> tool required
(case B09) -> evidence contract -> claims without receipts.  The first
stage that does not accept decides; if all accept, the answer is
``completed``.  The stages that rest on
delegation and a fresh verifier live in ``core/policy/gates.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from nahida_workers.core.events import (
    CompletionContract,
    EventType,
    EvidenceKind,
    EvidenceMode,
    ReasonCode,
    TerminalState,
)
from nahida_workers.core.messages import ToolChoice
from nahida_workers.core.policy.actions import (
    Accept,
    CandidateContext,
    ContinueWithInbox,
    Correct,
    PolicyAction,
    RunStopHooks,
    Settle,
    Stage,
    corrections_after,
    corrections_by,
    last_mutation_seq,
    last_steering_seq,
    ok_receipts_in_order,
    schema_digest,
)
from nahida_workers.core.policy.detectors import (
    Claim,
    VerifyCategory,
    announces_action,
    claims,
    classify_command,
)
from nahida_workers.core.policy.gates import (
    delegation_contract,
    goal_verification,
    independent_verification,
)
from nahida_workers.core.tool_choice import STRUCTURED_OUTPUT_TOOL

__all__ = ["DEFAULT_STAGES", "STRUCTURED_OUTPUT_TOOL", "evaluate_candidate"]


_KIND_FOR_MODE = {
    EvidenceMode.OBSERVE: EvidenceKind.OBSERVE,
    EvidenceMode.MUTATE: EvidenceKind.MUTATE,
    EvidenceMode.DELIVER: EvidenceKind.DELIVER,
}


def _bounded(
    ctx: CandidateContext, stage: str, limit: int, text: str, then: Settle
) -> PolicyAction:
    if corrections_by(ctx.state, stage) < limit:
        return Correct(stage, text)
    return then


def pending_steering(ctx: CandidateContext) -> PolicyAction:
    """Steering input waits in the inbox: continue with it, do not finish."""
    return ContinueWithInbox() if ctx.pending_steering > 0 else Accept()


def truncation_exhausted(ctx: CandidateContext) -> bool:
    """The run had more truncated turns (with or without calls) than recoveries allowed."""
    return ctx.state.tallies.truncated_turns > ctx.limits.truncation_recoveries


def structured_output(ctx: CandidateContext) -> PolicyAction:
    """Only a valid StructuredOutput call counts; JSON in prose is not an answer.

    The accepted object must come after the last workspace mutation and the
    last steering input (either clears it).  And (docs/concepts/context.md):

    * a valid object does not pass once the run's truncation recoveries ran
      out (:func:`truncation_exhausted`): ``incomplete/truncation_exhausted``
      -- the output limit cut the run's work, whatever it committed before;
    * the correction budget counts only corrections since that same point:
      new steering or a mutation gives the model its full budget again.
    """
    schema = ctx.contract.output_schema
    if schema is None:
        return Accept()
    if truncation_exhausted(ctx):
        return Settle(TerminalState.INCOMPLETE, ReasonCode.TRUNCATION_EXHAUSTED)
    digest = schema_digest(schema)
    since = max(last_mutation_seq(ctx.state), last_steering_seq(ctx.state))
    for seq, receipt in ok_receipts_in_order(ctx.state):
        if (
            seq > since
            and receipt.tool_name == STRUCTURED_OUTPUT_TOOL
            and receipt.evidence.get("valid") is True
            and receipt.evidence.get("schema_sha256") == digest
        ):
            return Accept()
    if corrections_after(ctx.state, "structured_output", since) < ctx.limits.structured_corrections:
        return Correct(
            "structured_output",
            f"Your answer must be given by calling the {STRUCTURED_OUTPUT_TOOL} tool with an "
            "object that matches the required JSON Schema. JSON written in the text is not "
            "accepted. Call the tool now.",
        )
    return Settle(TerminalState.UNVERIFIED, ReasonCode.STRUCTURED_OUTPUT_MISSING)


def needs_receipts(contract: CompletionContract) -> bool:
    """The contract can only be met by tool calls (receipts, a structured output)."""
    return bool(
        contract.evidence is not EvidenceMode.NONE
        or contract.required_tools
        or contract.required_receipt_kinds
        or contract.verify
        or contract.output_schema is not None
    )


def no_tool_calling(ctx: CandidateContext) -> PolicyAction:
    """A provider without tool calling cannot meet a contract that needs receipts.

    The run ends ``unverified/no_tool_calling`` at once (docs/concepts/context.md),
    with the runtime's explanation as its final text, instead of spending a
    correction turn asking for a tool call the provider cannot make.  A
    contract already met (receipts from an earlier provider of the run)
    passes on to the other stages.
    """
    if ctx.tool_calling or not needs_receipts(ctx.contract):
        return Accept()
    met = all(
        isinstance(stage(ctx), Accept)
        for stage in (structured_output, explicit_verification, evidence_contract)
    )
    if met:
        return Accept()
    return Settle(TerminalState.UNVERIFIED, ReasonCode.NO_TOOL_CALLING)


def incomplete_intent(ctx: CandidateContext) -> PolicyAction:
    """An answer ending by announcing an action it did not take is not finished."""
    if not announces_action(ctx.text):
        return Accept()
    return _bounded(
        ctx,
        "incomplete_intent",
        ctx.limits.intent_corrections,
        "Your reply announces an action but makes no tool call. If the work is not done, "
        "call the tool now; if it is done, give the final answer without announcing more.",
        Settle(TerminalState.INCOMPLETE, ReasonCode.INCOMPLETE_INTENT),
    )


def explicit_verification(ctx: CandidateContext) -> PolicyAction:
    """Each verification the user asked for ran and passed after the last change."""
    wanted = {VerifyCategory(v) for v in ctx.contract.verify}
    if not wanted:
        return Accept()
    since = last_mutation_seq(ctx.state)
    done: set[VerifyCategory] = set()
    for seq, receipt in ok_receipts_in_order(ctx.state):
        if seq > since and receipt.tool_name == "Bash" and receipt.evidence.get("exit_code") == 0:
            done |= classify_command(str(receipt.evidence.get("command", "")))
    missing = sorted(c.value for c in wanted - done)
    if not missing:
        return Accept()
    return _bounded(
        ctx,
        "verification",
        ctx.limits.verification_corrections,
        "The user asked for verification that has not passed since the last change: "
        + ", ".join(missing)
        + ". Run it with Bash and fix what fails before answering.",
        Settle(TerminalState.UNVERIFIED, ReasonCode.VERIFICATION_MISSING),
    )


def stop_hooks(ctx: CandidateContext) -> PolicyAction:
    """Configured stop hooks: only an explicit "do not stop" continues the run.

    The runtime runs the hooks (a timeout or an exception allows stopping) and
    records the verdict as a ``control`` event for this candidate.
    """
    if not ctx.stop_hooks:
        return Accept()
    verdict = next(
        (
            e.payload
            for e in reversed(ctx.state.events)
            if e.type is EventType.CONTROL
            and e.payload.get("kind") == "stop_hook"
            and e.payload.get("candidate") == ctx.candidate.sequence
        ),
        None,
    )
    if verdict is None:
        return RunStopHooks(ctx.candidate.sequence)
    if verdict.get("verdict") != "block":
        return Accept()
    if corrections_by(ctx.state, "stop_hook") >= ctx.limits.stop_hook_continuations:
        return Accept()
    return Correct("stop_hook", str(verdict.get("message") or "A stop hook asks you to continue."))


def tool_required(ctx: CandidateContext) -> PolicyAction:
    """tool_choice=required and the run never called a tool -> unverified (case B09)."""
    if ctx.tool_choice is ToolChoice.REQUIRED and not ctx.state.calls:
        return Settle(TerminalState.UNVERIFIED, ReasonCode.TOOL_REQUIRED_NOT_CALLED)
    return Accept()


def _evidence_kinds(ctx: CandidateContext) -> set[EvidenceKind]:
    kinds: set[EvidenceKind] = set()
    for _seq, receipt in ok_receipts_in_order(ctx.state):
        if receipt.evidence_kind is EvidenceKind.DELIVER and not receipt.evidence.get(
            "external_id"
        ):
            continue  # a delivery without its external id is not evidence
        kinds.add(receipt.evidence_kind)
    return kinds


def evidence_contract(ctx: CandidateContext) -> PolicyAction:
    """observe/mutate/deliver need a matching ok receipt; one correction, then unverified."""
    needed: set[EvidenceKind] = set(ctx.contract.required_receipt_kinds)
    if ctx.contract.evidence in _KIND_FOR_MODE:
        needed.add(_KIND_FOR_MODE[ctx.contract.evidence])
    missing_kinds = sorted(k.value for k in needed - _evidence_kinds(ctx))
    ok_tools = {r.tool_name for _s, r in ok_receipts_in_order(ctx.state)}
    missing_tools = sorted(set(ctx.contract.required_tools) - ok_tools)
    if not missing_kinds and not missing_tools:
        return Accept()
    parts = [f"{k} evidence" for k in missing_kinds]
    parts += [f"a successful {t} call" for t in missing_tools]
    return _bounded(
        ctx,
        "evidence",
        ctx.limits.evidence_corrections,
        "Your answer is not backed by the ledger: missing "
        + ", ".join(parts)
        + ". Use the tools to do and check the work, then answer again.",
        Settle(TerminalState.UNVERIFIED, ReasonCode.EVIDENCE_MISSING),
    )


def claims_backed(ctx: CandidateContext) -> PolicyAction:
    """An answer that says something was read, changed, run or sent needs the receipt.

    Read -> an observe receipt (or any successful Bash/Read/Grep/Glob/LS);
    changed -> a mutate receipt; ran -> a Bash receipt; passed ("all tests
    pass") -> a successful Bash receipt (exit code 0); sent -> a deliver
    receipt with its external id.
    """
    said = claims(ctx.text)
    if not said:
        return Accept()
    kinds = _evidence_kinds(ctx)
    tools = {r.tool_name for _s, r in ok_receipts_in_order(ctx.state)}
    # A synthetic receipt (a call closed as interrupted, refused by a bound)
    # says nothing ran to the end: it backs no claim.
    all_tools = {
        r.tool_name for r in ctx.state.receipts.values() if not r.evidence.get("synthetic")
    }
    backed = {
        Claim.READ: bool(kinds & {EvidenceKind.OBSERVE, EvidenceKind.MUTATE}),
        Claim.CHANGED: EvidenceKind.MUTATE in kinds and bool(tools & {"Write", "Edit", "Bash"}),
        Claim.RAN: "Bash" in all_tools,
        Claim.PASSED: "Bash" in tools,
        Claim.SENT: EvidenceKind.DELIVER in kinds,
    }
    if all(backed[c] for c in said):
        return Accept()
    return Settle(TerminalState.UNVERIFIED, ReasonCode.CLAIM_WITHOUT_RECEIPT)


#: The stages in DESIGN.md section 6 order.
DEFAULT_STAGES: tuple[Stage, ...] = (
    pending_steering,
    no_tool_calling,
    structured_output,
    incomplete_intent,
    delegation_contract,
    independent_verification,
    explicit_verification,
    stop_hooks,
    goal_verification,
    tool_required,
    evidence_contract,
    claims_backed,
)


def evaluate_candidate(
    ctx: CandidateContext, stages: Sequence[Stage] = DEFAULT_STAGES
) -> PolicyAction:
    """Run the stages; the first non-accepting one decides, else completed."""
    for stage in stages:
        action = stage(ctx)
        if not isinstance(action, Accept):
            return action
    return Settle(TerminalState.COMPLETED, ReasonCode.ANSWER_ACCEPTED)
