"""Building the real adapters from settings: the one place URLs become objects.

Embedded and distributed modes differ only in URLs (DESIGN.md section 1):

================  =============================  ===========================
                  distributed                    embedded (``--local``)
================  =============================  ===========================
database_url      postgresql+psycopg://...       sqlite:///var/nahida.sqlite3
broker_url        redis://.../0                  memory://
result_backend    redis://.../1                  cache+memory://
redis_url         redis://.../2                  fakeredis://
remote_tools      true (``tools`` queue)         false (local thread pool)
================  =============================  ===========================
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nahida_workers.core.lineage import ChildLimits
from nahida_workers.core.policy.goals import GOAL_TOOL
from nahida_workers.core.records import InboxLimits
from nahida_workers.core.tool_profiles import (
    PROFILE_CLASSES,
    RiskClass,
    outside_profile,
    risk_class,
)
from nahida_workers.errors import ConfigError
from nahida_workers.lease.redis import RedisLeaseStore
from nahida_workers.ledger.migrate import upgrade
from nahida_workers.ledger.sql import SqlLedger, make_engine
from nahida_workers.ports import Clock, Provider, SystemClock, TaskQueue
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.factory import build_provider
from nahida_workers.runtime.dispatch.dispatcher import Dispatcher
from nahida_workers.runtime.dispatch.inbox import Inbox
from nahida_workers.runtime.fanout.executor import InlineExecutor, ToolExecutor
from nahida_workers.runtime.observe.channel import RedisStreamSink
from nahida_workers.runtime.ownership.session import SessionRunner
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.settings import EMBEDDED_URLS, Settings
from nahida_workers.tools.base import ToolRegistry
from nahida_workers.tools.registration import build_registry, load_tool, sandbox_for, stop_hooks_of
from nahida_workers.tools.structured import StructuredOutput
from nahida_workers.workspaces import WorktreeManager

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = [
    "EMBEDDED_URLS",
    "Fleet",
    "build_fleet",
    "build_registry",
    "check_tool_profile",
    "lease_store",
    "load_tool",
    "redis_client",
    "registry_for",
    "sandbox_for",
    "stop_hooks_of",
]


_fake_server_lock = threading.Lock()
_fake_server: Any = None


def redis_client(settings: Settings) -> Any:
    """A client for ``settings.redis_url`` (``fakeredis://`` = one in-process server).

    Socket timeouts are seconds: a Redis that stops answering fails a call
    instead of hanging a worker.
    """
    global _fake_server
    if settings.redis_url.startswith("fakeredis://"):
        import fakeredis

        with _fake_server_lock:
            if _fake_server is None:
                _fake_server = fakeredis.FakeServer()
        return fakeredis.FakeRedis(server=_fake_server)
    import redis

    return redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)


def lease_store(settings: Settings) -> RedisLeaseStore:
    """The lease store for ``settings.redis_url``."""
    return RedisLeaseStore(redis_client(settings), key_prefix=settings.redis_key_prefix)


def registry_for(spec: SessionSpec, settings: Settings) -> ToolRegistry:
    """The tools a session may use, with placement overrides applied.

    A contract with an ``output_schema`` adds the reserved StructuredOutput
    tool; a job with a ``goal:`` gets ``UpdateGoal`` even if it does not list it.
    The session's stop hooks are checked here too: every entry point (batch,
    schedules, the API) and every worker builds this registry before anything
    runs, so an unregistered name is refused before it runs.

    Raises:
        ConfigError: an unregistered tool or stop hook, a bad placement or
            sandbox setting.
    """
    stop_hooks_of(settings).check(spec.stop_hooks)
    names = spec.tools
    if spec.goal is not None and GOAL_TOOL not in names:
        names = (*names, GOAL_TOOL)
    registry = build_registry(
        names,
        settings,
        placement=spec.placement,
        bash_timeout_s=spec.limits.bash_timeout_s,
        network=spec.network,
    )
    check_tool_profile(spec, registry)
    schema = spec.contract.output_schema
    if schema is None:
        return registry
    return registry.with_tool(StructuredOutput(schema))


def check_tool_profile(spec: SessionSpec, registry: ToolRegistry) -> None:
    """Refuse a spec that names a tool above its ``tool_profile`` (``core/tool_profiles.py``).

    Tools the registry does not hold (``Task``, the team tools: the runtime
    runs them) are checked by the spec itself (``SessionSpec``).

    Raises:
        ConfigError: the first tool outside the profile, with its risk class.
    """
    if spec.tool_profile is None:
        return
    classes: list[tuple[str, RiskClass]] = []
    for name in spec.tools:
        tool = registry.get(name)
        if tool is not None:
            traits = tool.spec
            cls = risk_class(read_only=traits.read_only, evidence_kind=traits.evidence_kind)
            classes.append((name, cls))
    refused = outside_profile(spec.tool_profile, classes)
    if refused:
        name, cls = refused[0]
        allowed = ", ".join(sorted(c.value for c in PROFILE_CLASSES[spec.tool_profile]))
        raise ConfigError(
            f"tool {name} is a {cls.value} tool; tool_profile {spec.tool_profile.value} "
            f"allows {allowed} tools only"
        )


def provider_for(spec: SessionSpec) -> Provider:
    """Build the session's provider from its config snapshot.

    Raises:
        ConfigError: the provider config is invalid.
    """
    try:
        config = ProviderConfig.model_validate(spec.provider)
    except ValueError as exc:
        raise ConfigError(f"invalid provider config: {exc}") from None
    return build_provider(config)


@dataclass
class Fleet:
    """Process-level resources of a worker or a CLI command."""

    settings: Settings
    ledger: SqlLedger
    leases: RedisLeaseStore
    clock: Clock
    runner: SessionRunner
    dispatcher: Dispatcher
    inbox: Inbox


def build_fleet(
    settings: Settings,
    queue: TaskQueue,
    *,
    executor: ToolExecutor | None = None,
    migrate: bool = False,
    clock: Clock | None = None,
    engine: Engine | None = None,
) -> Fleet:
    """Wire ledger, lease store, runner and dispatcher for ``settings``.

    Args:
        queue: where the dispatcher publishes (Celery in production).
        executor: tool executor (default: inline in the session worker).
        migrate: run the Alembic migrations first (embedded mode, ``nahida migrate``).
        engine: the ledger's engine (default: ``make_engine`` with its defaults;
            ``nahida serve`` passes one sized by its ``api_db_*`` settings).
    """
    clock = clock or SystemClock()
    engine = engine or make_engine(settings.database_url)
    if migrate:
        upgrade(engine)
    ledger = SqlLedger(engine=engine, payload_max_bytes=settings.event_payload_max_bytes)
    leases = lease_store(settings)
    runner = SessionRunner(
        ledger=ledger,
        leases=leases,
        clock=clock,
        provider_for=provider_for,
        registry_for=lambda spec: registry_for(spec, settings),
        executor=executor or InlineExecutor(clock.now),
        lease_ttl_ms=settings.lease_ttl_ms,
        ledger_outage_s=settings.ledger_outage_s,
        ledger_seal_outage_s=settings.ledger_seal_outage_s,
        sink=RedisStreamSink(redis_client(settings), prefix=settings.redis_key_prefix),
        poison_after_crashes=settings.poison_after_crashes,
    )
    dispatcher = Dispatcher(
        ledger, queue, clock, prompt_inline_max_bytes=settings.inline_prompt_max_bytes
    )
    runner.stop_hooks = stop_hooks_of(settings)  # only the operator's (plugins.py)
    runner.publish = dispatcher.publish  # child sessions and woken parents (section 8)
    runner.worktrees = WorktreeManager.from_settings(settings)  # isolation: worktree children
    runner.child_limits = ChildLimits(
        max_depth=settings.child_max_depth,
        max_per_session=settings.child_max_per_session,
        max_running_per_root=settings.child_max_running_per_root,
    )
    runner.inbox_limits = InboxLimits(
        max_user=settings.inbox_max_user,
        max_background=settings.inbox_max_background,
        max_bytes=settings.inbox_max_bytes,
    )  # background child completions are posted under the same bounds
    inbox = Inbox(ledger, leases, dispatcher, clock, runner.inbox_limits, sink=runner.sink)
    return Fleet(settings, ledger, leases, clock, runner, dispatcher, inbox)
