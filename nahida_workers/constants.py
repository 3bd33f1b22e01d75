"""Fixed names and defaults in one place (STYLE.md habit 8).

Redis key templates (each prefixed by ``Settings.redis_key_prefix``), Celery
queue and task names, ledger keys, and the defaults that both
:class:`~nahida_workers.settings.Settings` and the runtime's own dataclasses
use, so the two never drift apart.  Units are in the names (``_S`` seconds,
``_MS`` milliseconds).
"""

from __future__ import annotations

__all__ = [
    "BATCH_GROUP_TEMPLATE",
    "BROKER_RUN_ID_KEY",
    "CANCEL_POLL_S",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_LEDGER_OUTAGE_S",
    "DEFAULT_LEDGER_SEAL_OUTAGE_S",
    "DEFAULT_MAX_RUNNING",
    "DEFAULT_POISON_AFTER_CRASHES",
    "DEFAULT_PRIORITY",
    "DEFAULT_PROVIDER_API_KEY_ENV",
    "DEFAULT_PROVIDER_BASE_URLS",
    "EPOCH_CHECK_RETRY_S",
    "EVENT_STREAM_KEY_TEMPLATE",
    "LEASE_KEY_TEMPLATE",
    "LEASE_OUTAGE_RETRY_S",
    "MAX_PRIORITY",
    "RUN_SESSION",
    "RUN_TOOL_CALL",
    "SCHEDULE_GROUP_TEMPLATE",
    "SCHEDULE_TICK",
    "SESSIONS_QUEUE",
    "SWEEP",
    "TOOLS_QUEUE",
    "TOOL_RESULT_KEY_PREFIX",
    "TOOL_RESULT_TTL_S",
]

# -- Redis keys (all prefixed by ``redis_key_prefix``) ---------------------------
#: A session lease (DESIGN.md section 4).
LEASE_KEY_TEMPLATE = "lease:session:{session_id}"
#: The capped stream of a session's user-visible events (``nahida watch``).
EVENT_STREAM_KEY_TEMPLATE = "events:session:{session_id}"
#: One Redis list per fanned-out tool task: the tool worker pushes its result there.
TOOL_RESULT_KEY_PREFIX = "tool-result:"
#: Seconds a tool result waits in Redis for its session worker.
TOOL_RESULT_TTL_S = 600

# -- Celery queues and task names --------------------------------------------------
#: Queue that carries ``run_session`` tasks (and the beat tasks).
SESSIONS_QUEUE = "sessions"
#: Queue that carries fanned-out read-only tool calls.
TOOLS_QUEUE = "tools"
RUN_SESSION = "nahida.run_session"
RUN_TOOL_CALL = "nahida.run_tool_call"
SWEEP = "nahida.sweep"
SCHEDULE_TICK = "nahida.schedule_tick"

# -- dispatch priority and admission (DESIGN.md section 1) -------------------------
#: Session priorities run from 0 to this; higher is taken from the queue first.
MAX_PRIORITY = 9
#: The priority of a session whose job names none.
DEFAULT_PRIORITY = 5
#: Admission group of a batch's sessions (and its children).
BATCH_GROUP_TEMPLATE = "batch:{batch_id}"
#: Admission group of every fire of a schedule (one cap across its fires).
SCHEDULE_GROUP_TEMPLATE = "schedule:{schedule_id}"
#: How many sessions of one group run at once when its job names no cap.
DEFAULT_MAX_RUNNING = 8

# -- ledger keys ----------------------------------------------------------------------
#: ``fleet_state`` key holding the broker's Redis run id (the sweeper's reset check).
BROKER_RUN_ID_KEY = "broker_redis_run_id"

# -- defaults shared by the settings and the runtime --------------------------------
#: Lease TTL, seconds (heartbeat at a third of it).
DEFAULT_LEASE_TTL_S = 30.0
#: How long a commit point is retried through a ledger outage, seconds.
DEFAULT_LEDGER_OUTAGE_S = 10.0
#: How long the seal ``failed/tool_persistence_failed`` is retried, seconds.
DEFAULT_LEDGER_SEAL_OUTAGE_S = 300.0
#: Seconds between lease renewal attempts while the lease store does not answer
#: (a restarting Redis): the owner re-takes its lease as soon as the store is back.
LEASE_OUTAGE_RETRY_S = 0.25
#: Owners in a row that crash without progress before ``failed/poison_session``.
DEFAULT_POISON_AFTER_CRASHES = 3
#: Seconds between two reads of the cancel flag while tools are outstanding.
CANCEL_POLL_S = 1.0
#: Seconds a tool worker retries its epoch check through a ledger outage.
EPOCH_CHECK_RETRY_S = 3.0

# -- providers (providers/config.py; the API job policy's defaults, settings.py)
#: The environment variable an HTTP provider's key is read from unless a job names another.
DEFAULT_PROVIDER_API_KEY_ENV = "NAHIDA_PROVIDER_API_KEY"
#: The API root of each HTTP provider kind when a job names none.
DEFAULT_PROVIDER_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
