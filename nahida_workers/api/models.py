"""The shapes ``/v1`` accepts and returns: its OpenAPI schema is generated from these models.

A job posted to ``POST /v1/sessions`` is validated here, field by field,
before it becomes a :class:`~nahida_workers.runtime.spec.JobSpec`: the same
fields as a job file, with the provider typed by ``kind`` (a scripted
provider carries its turns inline, an HTTP provider names its model).  What
depends on the server's settings -- the registered tool names, the API job
policy's base URLs, key variables and stop hooks, the longest event stream --
is written into the schema by :mod:`nahida_workers.api.openapi`, and checked
again in the routes.

Responses reuse the ledger's record models (serialization schemas), so the
schema and the body cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from nahida_workers.api.fleet_models import UsageTotals
from nahida_workers.constants import DEFAULT_PRIORITY, MAX_PRIORITY
from nahida_workers.core.children import TaskIsolation
from nahida_workers.core.context import DEFAULT_INSTRUCTION_FILES
from nahida_workers.core.events import Event, EvidenceKind, EvidenceMode, ExecutionReceipt
from nahida_workers.core.messages import StopReason, ToolChoice
from nahida_workers.core.policy.delegation import DelegationMode
from nahida_workers.core.policy.verification import DEFAULT_HIGH_RISK, DEFAULT_NOT_IMPLEMENTATION
from nahida_workers.core.records import RunRecord, SessionRecord
from nahida_workers.core.tool_profiles import ToolProfile
from nahida_workers.providers.config import DEFAULT_API_KEY_ENV
from nahida_workers.runtime.observe.channel import ChannelPolicy
from nahida_workers.runtime.profiles import DEFAULT_TOOLS, Limits, ParentClose
from nahida_workers.tools.base import Placement

__all__ = [
    "MAX_ID",
    "AgentProfileIn",
    "AskIn",
    "BatchList",
    "BatchReport",
    "ErrorBody",
    "JobIn",
    "ProviderIn",
    "RunView",
    "SessionIn",
    "SessionView",
    "SideAnswerOut",
    "SteerIn",
    "TeamView",
]

#: Most characters of an id or id prefix in a path.
MAX_ID = 64
#: An id or a unique prefix of one, as a path segment: printable ASCII, no ``/``.
ID_PATTERN = r"^[!-.0-~]{1,64}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- the scripted provider's script (providers/scripted.py), as JSON ---------------------
# The same fields as Script, ScriptTurn, ScriptedCall and ScriptError (a unit
# test keeps them equal), with JSON arrays as lists: the strict parse of a
# request takes a JSON array for a list.
class ScriptedCallIn(_In):
    """One tool call of a script turn."""

    id: str = Field(max_length=200)
    name: str = Field(description="A tool the job offers.")
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = Field(None, description="Sent instead of `arguments`.")


class ScriptErrorIn(_In):
    """A scripted provider failure (an HTTP-like status)."""

    status: int = 500
    message: str = "scripted provider error"
    retry_after: float | None = None


class UsageIn(_In):
    """Token counts the turn reports."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ScriptExpectIn(_In):
    """What a script turn expects of the request it answers (else the provider fails)."""

    system_contains: list[str] = Field(default_factory=list, max_length=32)
    system_lacks: list[str] = Field(default_factory=list, max_length=32)
    last_user_contains: list[str] = Field(default_factory=list, max_length=32)
    tool_name: str | None = None


class ScriptTurnIn(_In):
    """One assistant turn of a script."""

    text: str = ""
    tool_calls: list[ScriptedCallIn] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    refusal: str | None = None
    content_blocks: list[dict[str, Any]] = Field(default_factory=list)
    usage: UsageIn | None = None
    delay_s: float = 0.0
    error: ScriptErrorIn | None = None
    expect: ScriptExpectIn | None = None


class AskTurnIn(ScriptTurnIn):
    """A turn served to a side conversation: answered within the request, so briefly."""

    delay_s: float = Field(0.0, ge=0, le=2.0)


class ScriptIn(_In):
    """A whole script: ``turns`` served in order, ``next_runs`` to later runs, maybe looping."""

    turns: list[ScriptTurnIn]
    next_runs: list[list[ScriptTurnIn]] = Field(default_factory=list)
    repeat_from: int | None = Field(
        None, ge=0, description="After a run's last turn, serve its turns from here again."
    )
    ask: list[AskTurnIn] = Field(
        default_factory=list,
        max_length=16,
        description="Turns served to side conversations (`POST /v1/sessions/{id}/ask`).",
    )


class _ProviderCommon(_In):
    name: str | None = Field(None, max_length=200, description="Recorded on each run.")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Seconds per connect and chunk.")
    tool_choice: ToolChoice | None = None
    supports_tools: bool = True
    named_tool_choice: bool = Field(
        True, description="The API accepts a named tool_choice (else `required` is sent)."
    )
    max_output_tokens: int | None = Field(None, gt=0)
    max_retries: int = Field(2, ge=0, le=20)
    fallbacks: list[ProviderIn] = Field(
        default_factory=list, max_length=8, description="Tried in order when this one fails."
    )


class ScriptedProviderIn(_ProviderCommon):
    """The scripted provider: its turns inline (over the API never a file or YAML text)."""

    kind: Literal["scripted"]
    model: str | None = Field(None, max_length=200, description="A label for the runs.")
    script: ScriptIn | list[ScriptTurnIn] = Field(
        description='``{"turns": [...]}`` or a list of turns (providers/scripted.py).'
    )

    @field_validator("script", mode="before")
    @classmethod
    def _inline_json(cls, value: Any) -> Any:
        # One clear refusal for a string (a path the server would read, YAML it
        # would parse), the same whether or not such a file exists.
        if not isinstance(value, dict | list):
            raise PydanticCustomError(
                "script_inline",
                "a provider script over the API is JSON: an object with turns, or a list "
                "of turns (not a file path or text)",
            )
        return value


class _HttpProviderIn(_ProviderCommon):
    model: str = Field(min_length=1, max_length=200)
    base_url: str | None = Field(
        None, description="API root; one of NAHIDA_API_ALLOWED_BASE_URLS (default: the kind's)."
    )
    api_key_env: str = Field(
        DEFAULT_API_KEY_ENV,
        description="Variable holding the key; one of NAHIDA_API_ALLOWED_KEY_ENVS.",
    )


class OpenAIProviderIn(_HttpProviderIn):
    """An OpenAI-compatible Chat Completions server."""

    kind: Literal["openai"]


class AnthropicProviderIn(_HttpProviderIn):
    """The Anthropic Messages API."""

    kind: Literal["anthropic"]


ProviderIn = Annotated[
    ScriptedProviderIn | OpenAIProviderIn | AnthropicProviderIn, Field(discriminator="kind")
]
_ProviderCommon.model_rebuild()


class OutputSchemaIn(BaseModel):
    """A JSON Schema for the StructuredOutput tool; it must describe an object."""

    model_config = ConfigDict(extra="allow")

    type: Literal["object"]


class ContractIn(_In):
    """The completion contract (:class:`~nahida_workers.core.events.CompletionContract`)."""

    evidence: EvidenceMode = EvidenceMode.NONE
    required_tools: list[str] = Field(default_factory=list, max_length=64)
    required_receipt_kinds: list[EvidenceKind] = Field(default_factory=list, max_length=8)
    verify: list[str] = Field(default_factory=list, max_length=16)
    output_schema: OutputSchemaIn | None = None
    allow_unfinished_children: bool = False


_TOOLS = Field(
    default_factory=lambda: list(DEFAULT_TOOLS),
    max_length=64,
    description="Registered tool names; ``null``: the parent's.",
    json_schema_extra={"uniqueItems": True},
)


_PROFILE_HELP = (
    "reviewer (read-only tools), editor (+ write) or deliverer (+ deliver): a ceiling on "
    "`tools`; with no `tools` it picks them."
)


def _unique(value: list[str] | None) -> list[str] | None:
    """A tools list names each tool once (``uniqueItems``)."""
    if value is not None and len(set(value)) != len(value):
        raise ValueError("each tool may be named once")
    return value


class AgentProfileIn(_In):
    """A child agent the job's ``Task`` tool may start (``null``: the parent's own)."""

    description: str = Field("", max_length=2000, description="Shown in the Task tool's schema.")
    system_prompt: str | None = None
    provider: ProviderIn | None = Field(description="``null``: the parent's provider.")
    tools: list[str] | None = _TOOLS
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: ContractIn = Field(default_factory=lambda: ContractIn())
    limits: Limits | None = Field(default_factory=Limits, description="``null``: the parent's.")
    parent_close: ParentClose = ParentClose.CANCEL
    network: bool = Field(False, description="Bash may use the network (NAHIDA_API_ALLOW_NETWORK).")
    tool_profile: ToolProfile | None = Field(None, description=_PROFILE_HELP)

    _unique_tools = field_validator("tools")(_unique)


class DelegationIn(_In):
    """The delegation contract (``core/policy/delegation.py``)."""

    mode: DelegationMode = DelegationMode.FREE
    areas: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="With `require`: one Task call per area (distinct, non-empty names).",
    )
    worktree_only: bool = False


class VerificationIn(_In):
    """The independent verification gate and the verifier's providers."""

    provider: ProviderIn | None = Field(None, description="``null``: the job's provider.")
    next_providers: list[ProviderIn] = Field(
        default_factory=list, max_length=8, description="The 2nd, 3rd ... verifier's."
    )
    min_files: int = Field(3, ge=1)
    high_risk_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_HIGH_RISK))
    not_implementation_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_NOT_IMPLEMENTATION)
    )


class MemoryIn(_In):
    """The workspace memory (docs/memory.md); off by default."""

    enabled: bool = False
    ttl_days: float = Field(90.0, gt=0, le=3650, description="Days a new item stays in use.")
    max_items: int = Field(20, ge=1, le=200, description="Most items in one request.")


class JobIn(_In):
    """A job, as in a job file (``config/jobs/*.yaml``), applied to one workspace."""

    name: str = Field("api", max_length=200, description="A label; not part of the session.")
    description: str = Field("", max_length=2000)
    priority: int = Field(
        DEFAULT_PRIORITY, ge=0, le=MAX_PRIORITY, description="9 is the most urgent."
    )
    max_running: int | None = Field(
        None, ge=0, description="Sessions of one batch running at once (0: no cap)."
    )
    prompt: str = Field(description="The first user input.")
    system_prompt: str | None = None
    provider: ProviderIn
    tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOOLS),
        max_length=64,
        description="Registered tool names.",
        json_schema_extra={"uniqueItems": True},
    )
    placement: dict[str, Placement] = Field(default_factory=dict, max_length=64)
    tool_choice: ToolChoice = ToolChoice.AUTO
    contract: ContractIn = Field(default_factory=lambda: ContractIn())
    limits: Limits = Field(default_factory=Limits)
    stop_hooks: list[str] = Field(
        default_factory=list, max_length=16, description="NAHIDA_API_ALLOWED_STOP_HOOKS only."
    )
    channel: ChannelPolicy = ChannelPolicy.FINAL_ONLY
    agents: dict[str, AgentProfileIn] = Field(
        default_factory=dict,
        max_length=16,
        description="By name; `general` and `explore` are built in, `verifier` is reserved.",
    )
    parent_close: ParentClose = ParentClose.CANCEL
    network: bool = Field(False, description="Bash may use the network (NAHIDA_API_ALLOW_NETWORK).")
    goal: str | None = Field(None, description="Completes only through a verifier's PASS.")
    delegation: DelegationIn = Field(default_factory=lambda: DelegationIn())
    verification: VerificationIn = Field(default_factory=lambda: VerificationIn())
    trust_workspace: bool = Field(
        False,
        description="Read agent definitions from the workspace's .nahida/agents/ and its "
        "instruction files (instruction_files) into the system prompt.",
    )
    instruction_files: list[str] = Field(
        default_factory=lambda: list(DEFAULT_INSTRUCTION_FILES),
        max_length=16,
        description="Relative paths read when trust_workspace is true (default AGENTS.md).",
    )
    tool_profile: ToolProfile | None = Field(None, description=_PROFILE_HELP)
    isolation: TaskIsolation = Field(
        TaskIsolation.SHARED,
        description="`worktree`: each session runs in its own git worktree of the workspace.",
    )
    memory: MemoryIn = Field(default_factory=lambda: MemoryIn())

    _unique_tools = field_validator("tools")(_unique)

    def job_data(self) -> dict[str, Any]:
        """The job as a job file's mapping (what :class:`JobSpec` validates).

        Only the fields the request set: an explicit ``null`` means what it
        means in a job file (an agent's ``null`` provider is its parent's).
        """
        return {"name": self.name, **self.model_dump(mode="json", exclude_unset=True)}


class SessionIn(_In):
    """``POST /v1/sessions``: a job applied to one workspace."""

    job: JobIn
    workspace: str = Field(
        min_length=1,
        max_length=4096,
        pattern=r"^/[^\x00]*$",
        description=(
            "An existing directory on the fleet, as an absolute path (inside "
            "NAHIDA_API_WORKSPACE_ROOTS when set)."
        ),
    )
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=200, description="The same key twice is one session."
    )


class SteerIn(_In):
    """``POST /v1/sessions/{id}/steer``."""

    text: str = Field(
        min_length=1,
        max_length=64 * 1024,
        description="The message; not only whitespace.",
        # "Not only whitespace" as ``not``, not as ``pattern: \\S``: the same
        # set, and generators draw from it quickly.
        json_schema_extra={"not": {"pattern": r"^\s*$"}},
    )
    message_id: str | None = Field(
        None, min_length=1, max_length=200, description="The same id twice is one message."
    )
    after_run: bool = Field(False, description="Start the next run with it, not this one.")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must hold a non-space character")
        return value


class AskIn(_In):
    """``POST /v1/sessions/{id}/ask``: a side question."""

    question: str = Field(
        min_length=1,
        max_length=16 * 1024,
        description="The question; not only whitespace.",
        json_schema_extra={"not": {"pattern": r"^\s*$"}},
    )

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question must hold a non-space character")
        return value


# -- responses -----------------------------------------------------------------------
class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code`` and a sentence."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class SessionCreated(BaseModel):
    """``POST /v1/sessions``: the session, whether this request created it, whether it is queued."""

    session: SessionRecord
    created: bool
    recorded: bool
    delivered: bool
    message: str | None = None


class SessionView(BaseModel):
    """A session, its runs (oldest first), its child sessions' ids and what its runs spent."""

    session: SessionRecord
    runs: list[RunRecord]
    children: list[str]
    usage: UsageTotals


class RunView(BaseModel):
    """A run, every event in order, every receipt, and the tokens its turns reported."""

    run: RunRecord
    usage: UsageTotals
    events: list[Event]
    receipts: list[ExecutionReceipt]


class Acted(BaseModel):
    """A steer or cancel the ledger recorded (``delivered: false``: the broker is down)."""

    model_config = ConfigDict(extra="forbid")

    recorded: bool
    delivered: bool
    message_id: str | None = None
    created: bool | None = None
    session_id: str | None = None
    message: str | None = None


class RefusedCallOut(BaseModel):
    """A tool call a side conversation refused (``turn``: its 0-based provider turn)."""

    turn: int
    call_id: str
    name: str


class SideAnswerOut(BaseModel):
    """A side conversation's answer; ``record`` is the sha256 of the exchange's artifact.

    Nothing was written to the session: its transcript and task are as before.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    question: str
    answer: str
    stop: Literal["answered", "turn_limit"]
    turns: int
    refused: list[RefusedCallOut]
    transcript_messages: int
    provider: str
    model: str
    record: str


class BatchRow(BaseModel):
    """One batch with its session counts."""

    batch_id: str
    job: str
    created_at: str
    sessions: int
    done: int


class BatchList(BaseModel):
    """Every batch (or the newest ``limit``), newest first."""

    batches: list[BatchRow]


class TeamView(BaseModel):
    """A team (``runtime/teams/projection.py``): members, the task graph, the claim history."""

    model_config = ConfigDict(extra="allow")

    team_id: str
    lead_id: str
    root_id: str
    version: int
    settled: bool
    counts: dict[str, int]
    members: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    history: list[dict[str, Any]] = Field(default_factory=list)


class BatchReport(BaseModel):
    """A batch's report: one row per top-level session, and a summary by state."""

    model_config = ConfigDict(extra="allow")

    batch_id: str
    job: str | None
    schedule: dict[str, Any] | None
    created_at: str | None
    started_at: str | None
    summary: dict[str, int]
    all_completed: bool
    sessions: list[dict[str, Any]]
