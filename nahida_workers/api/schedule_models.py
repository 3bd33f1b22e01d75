"""The shapes of ``/v1/schedules``: what a schedule request holds and what the routes return.

A schedule posted over the API carries its job inline (:class:`~nahida_workers.api.models.JobIn`,
checked as ``POST /v1/sessions`` checks one) and names its repositories as
absolute directories on the fleet (inside ``NAHIDA_API_WORKSPACE_ROOTS``
when set).  The answers are the documents ``nahida schedule ... --json``
prints (:mod:`nahida_workers.schedules.views`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nahida_workers.api.fleet_models import UsageTotals
from nahida_workers.api.models import JobIn
from nahida_workers.constants import MAX_PRIORITY
from nahida_workers.schedules.model import NAME_PATTERN, FireKind, FireOutcome, Overlap

__all__ = [
    "Applied",
    "ApplyIn",
    "FireView",
    "ScheduleIn",
    "ScheduleList",
    "ScheduleView",
    "Triggered",
]

_EXAMPLE_JOB: dict[str, Any] = {
    "name": "nightly-survey",
    "prompt": "List the TODO comments of this repository.",
    "provider": {"kind": "scripted", "script": [{"text": "No TODO comments."}]},
    "tools": ["Grep"],
}


class ScheduleIn(BaseModel):
    """``POST /v1/schedules`` (and each entry of ``POST /v1/schedules/apply``)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "nightly-survey",
                    "job": _EXAMPLE_JOB,
                    "repos": ["/srv/repos/app"],
                    "cron": "0 3 * * *",
                    "timezone": "Europe/Berlin",
                    "overlap": "skip",
                }
            ]
        },
    )

    name: str = Field(pattern=NAME_PATTERN, description="Unique among live schedules.")
    job: JobIn
    repos: list[Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$")]] = (
        Field(
            min_length=1,
            max_length=1000,
            description="Absolute directories on the fleet (inside NAHIDA_API_WORKSPACE_ROOTS "
            "when set); one session per repository per fire.",
        )
    )
    cron: str | None = Field(
        None, min_length=1, max_length=200, description="A 5-field cron expression."
    )
    every: str | None = Field(
        None,
        min_length=1,
        max_length=50,
        description="An interval instead of cron: 90, 30s, 10m, 1h30m, 2d.",
    )
    timezone: str = Field("UTC", min_length=1, max_length=100, description="IANA time zone.")
    overlap: Overlap = Overlap.SKIP
    catchup_window: str = Field(
        "5m", min_length=1, max_length=50, description="Run fires missed by at most this."
    )
    jitter: str = Field("0s", min_length=1, max_length=50, description="Delay each fire by up to.")
    priority: int | None = Field(None, ge=0, le=MAX_PRIORITY, description="Default: the job's.")
    max_running: int | None = Field(
        None, ge=0, description="Sessions of all its fires running at once (0: no cap)."
    )


class ApplyIn(BaseModel):
    """``POST /v1/schedules/apply``: create or update each schedule (idempotent; removes none)."""

    model_config = ConfigDict(extra="forbid")

    schedules: list[ScheduleIn] = Field(min_length=1, max_length=100)


class FireView(BaseModel):
    """One fire: the decision about one fire time, its batch, who decided it."""

    model_config = ConfigDict(extra="allow")

    schedule_id: str
    fire_time: str
    due_at: str
    kind: FireKind
    outcome: FireOutcome
    batch_id: str | None = None
    decided_at: str
    decided_by: str
    dispatched_at: str | None = None
    finished_at: str | None = None
    attempts: int = 0
    detail: dict[str, Any] = Field(default_factory=dict)
    usage: UsageTotals | None = Field(
        None, description="What the fire's batch spent (getSchedule's fires; null: no batch)."
    )


class ScheduleView(BaseModel):
    """A schedule: its state, trigger, next and last fire (and, when shown, its fires)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "name": "nightly-survey",
                    "schedule_id": "5f0c2e9a7b1d4c3e8f6a9b0c1d2e3f4a",
                    "state": "active",
                    "trigger": "cron 0 3 * * * (Europe/Berlin)",
                    "next_fire": "2026-12-02T02:00:00Z",
                    "last_fire": None,
                    "definition": {"name": "nightly-survey", "overlap": "skip"},
                    "job": "nightly-survey",
                    "cursor": "2026-12-01T18:00:00Z",
                    "version": 0,
                    "created_at": "2026-12-01T18:00:00+00:00",
                    "updated_at": "2026-12-01T18:00:00+00:00",
                    "removed_at": None,
                }
            ]
        },
    )

    name: str
    schedule_id: str
    state: Literal["active", "paused", "removed"]
    trigger: str
    next_fire: str | None
    last_fire: FireView | None
    definition: dict[str, Any]
    job: str | None
    cursor: str
    version: int
    created_at: str
    updated_at: str
    removed_at: str | None = None
    fires: list[FireView] | None = Field(None, description="Newest first (getSchedule only).")


class ScheduleList(BaseModel):
    """Live schedules by name (``/v1/removed-schedules``: removed ones, latest removal first)."""

    schedules: list[ScheduleView]


class AppliedRow(BaseModel):
    """What ``apply`` did to one schedule."""

    name: str
    schedule_id: str
    change: Literal["created", "updated", "unchanged"]


class Applied(BaseModel):
    """``POST /v1/schedules/apply``: one row per schedule, in the request's order."""

    results: list[AppliedRow]


class Triggered(BaseModel):
    """A manual fire, decided under the schedule's overlap policy.

    ``delivered: false``: its sessions are recorded and the broker is down;
    beat's sweeper publishes them (``undelivered_sessions`` of them).
    """

    fire: FireView
    undelivered_sessions: int
    recorded: bool
    delivered: bool
    message: str | None = None
