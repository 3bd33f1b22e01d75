"""An example of every ``/v1`` route's request body and success answer, for the OpenAPI schema.

The answers are built from the models the routes return (a session record,
a run with its events and receipts, a batch report ...), so an example
cannot hold a field the answer does not have.  :func:`add_examples` writes
them into the document (``install_openapi`` calls it); a test checks that
every operation has one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nahida_workers.core.events import (
    Event,
    EventType,
    ExecutionReceipt,
    ReasonCode,
    SessionStatus,
    TerminalState,
    ToolStatus,
)
from nahida_workers.core.records import RunRecord, SessionRecord

__all__ = ["REQUESTS", "add_examples", "responses"]

_AT = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
_SID = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
_RID = "9a8b7c6d5e4f30211203f4e5d6c7b8a9"
_BID = "5b4a39281706f5e4d3c2b1a098f7e6d5"
_JOB: dict[str, Any] = {
    "name": "todo-survey",
    "prompt": "List the TODO comments of this repository.",
    "tools": ["Grep"],
    "provider": {
        "kind": "scripted",
        "script": [
            {"tool_calls": [{"id": "g1", "name": "Grep", "arguments": {"pattern": "TODO"}}]},
            {"text": "No TODO comments."},
        ],
    },
}
_SCHEDULE: dict[str, Any] = {
    "name": "nightly-survey",
    "job": _JOB,
    "repos": ["/srv/repos/app"],
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "overlap": "skip",
}
_USAGE = {
    "turns": 2,
    "input_tokens": 4000,
    "output_tokens": 300,
    "cached_tokens": 400,
    "cache_write_tokens": 0,
    "cost_usd": 0.01662,
    "unpriced_turns": 0,
}

#: Request bodies by operation id.
REQUESTS: dict[str, Any] = {
    "createSession": {"job": _JOB, "workspace": "/srv/repos/app", "idempotency_key": "survey-1"},
    "steerSession": {"text": "Also list the FIXME comments.", "message_id": "m-1"},
    "askSession": {"question": "Which files have you read so far?"},
    "createSchedule": _SCHEDULE,
    "applySchedules": {"schedules": [_SCHEDULE]},
}


def _session() -> dict[str, Any]:
    return SessionRecord(
        session_id=_SID,
        workspace="/srv/repos/app",
        status=SessionStatus.DONE,
        created_at=_AT,
        updated_at=_AT,
    ).model_dump(mode="json")


def _run() -> dict[str, Any]:
    return RunRecord(
        run_id=_RID,
        session_id=_SID,
        provider="scripted",
        model="scripted",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        started_at=_AT,
        ended_at=_AT,
        terminal_state=TerminalState.COMPLETED,
        terminal_reason=ReasonCode.ANSWER_ACCEPTED,
    ).model_dump(mode="json")


def _events() -> list[dict[str, Any]]:
    events = [
        Event(run_id=_RID, sequence=1, type=EventType.USER_INPUT, payload={"text": _JOB["prompt"]}),
        Event(
            run_id=_RID,
            sequence=2,
            type=EventType.TOOL_CALL,
            call_id="g1",
            payload={"name": "Grep", "arguments": {"pattern": "TODO"}},
        ),
    ]
    return [e.model_dump(mode="json") for e in events]


def _receipt() -> dict[str, Any]:
    return ExecutionReceipt(
        run_id=_RID,
        call_id="g1",
        tool_name="Grep",
        status=ToolStatus.OK,
        started_at=_AT,
        finished_at=_AT,
        input_fingerprint="3f" * 32,
    ).model_dump(mode="json")


def _fire() -> dict[str, Any]:
    return {
        "schedule_id": "5f0c2e9a7b1d4c3e8f6a9b0c1d2e3f4a",
        "fire_time": "2026-12-01T18:00:00Z",
        "due_at": "2026-12-01T18:00:00Z",
        "kind": "manual",
        "outcome": "dispatched",
        "batch_id": _BID,
        "decided_at": "2026-12-01T18:00:00Z",
        "decided_by": "api",
        "attempts": 1,
        "detail": {},
    }


def _schedule(state: str = "active") -> dict[str, Any]:
    return {
        "name": "nightly-survey",
        "schedule_id": "5f0c2e9a7b1d4c3e8f6a9b0c1d2e3f4a",
        "state": state,
        "trigger": "cron 0 3 * * * (Europe/Berlin)",
        "next_fire": None if state != "active" else "2026-12-02T02:00:00Z",
        "last_fire": None,
        "definition": {"name": "nightly-survey", "repos": ["/srv/repos/app"], "overlap": "skip"},
        "job": "todo-survey",
        "cursor": "2026-12-01T18:00:00Z",
        "version": 0,
        "created_at": "2026-12-01T18:00:00+00:00",
        "updated_at": "2026-12-01T18:00:00+00:00",
        "removed_at": None if state != "removed" else "2026-12-01T19:00:00+00:00",
    }


def responses() -> dict[str, tuple[str, Any]]:
    """Operation id -> (success status, an example answer)."""
    session, run = _session(), _run()
    row = {"session_id": _SID, "workspace": "/srv/repos/app", "status": "done", "usage": _USAGE}
    report = {
        "batch_id": _BID,
        "job": "todo-survey",
        "schedule": None,
        "created_at": "2026-12-01T18:00:00+00:00",
        "started_at": None,
        "summary": {"completed": 1},
        "all_completed": True,
        "usage": _USAGE,
        "sessions": [row],
    }
    acted = {"recorded": True, "delivered": True, "message_id": "m-1", "created": True}
    team = {
        "team_id": _SID,
        "lead_id": _SID,
        "root_id": _SID,
        "version": 3,
        "settled": True,
        "counts": {"open": 0, "claimed": 0, "done": 1, "failed": 0},
        "members": [{"member_id": _SID, "name": "lead", "role": "lead", "state": "completed"}],
        "tasks": [{"task_id": "t1", "status": "done", "owner": _SID, "depends_on": []}],
        "history": [],
    }
    tree = {
        **{k: session[k] for k in ("session_id", "parent_id", "status")},
        "state": "completed",
        "agent": None,
        "description": None,
        "call_id": None,
        "depth": 0,
        "seconds": 1.5,
        "runs": [
            {
                "run_id": _RID,
                "state": "completed",
                "reason": "answer_accepted",
                "started_at": "2026-12-01T18:00:00+00:00",
                "ended_at": "2026-12-01T18:00:01.500000+00:00",
                "seconds": 1.5,
            }
        ],
        "children": [],
        "usage": _USAGE,
    }
    created = {"session": session, "created": True, "recorded": True, "delivered": True}
    shown = {**_schedule(), "fires": [{**_fire(), "usage": _USAGE}]}
    jobs = [{"job": "todo-survey", "sessions": 1, "runs": 1, **_USAGE}]
    return {
        "createSession": ("201", created),
        "getSession": ("200", {"session": session, "runs": [run], "children": [], "usage": _USAGE}),
        "getRun": (
            "200",
            {"run": run, "usage": _USAGE, "events": _events(), "receipts": [_receipt()]},
        ),
        "steerSession": ("202", acted),
        "askSession": (
            "200",
            {
                "session_id": _SID,
                "question": "Which files have you read so far?",
                "answer": "README.md and src/app.py.",
                "stop": "answered",
                "turns": 1,
                "refused": [],
                "transcript_messages": 4,
                "provider": "scripted",
                "model": "scripted",
                "record": "3f" * 32,
            },
        ),
        "cancelSession": ("202", {"recorded": True, "delivered": True, "session_id": _SID}),
        "listBatches": (
            "200",
            {
                "batches": [
                    {
                        "batch_id": _BID,
                        "job": "todo-survey",
                        "created_at": "2026-12-01T18:00:00+00:00",
                        "sessions": 1,
                        "done": 1,
                    }
                ]
            },
        ),
        "getBatch": ("200", report),
        "getTeam": ("200", team),
        "getSessionTree": ("200", tree),
        "listSchedules": ("200", {"schedules": [_schedule()]}),
        "createSchedule": ("201", {**_schedule(), "fires": []}),
        "applySchedules": (
            "200",
            {
                "results": [
                    {
                        "name": "nightly-survey",
                        "schedule_id": "5f0c2e9a7b1d4c3e8f6a9b0c1d2e3f4a",
                        "change": "created",
                    }
                ]
            },
        ),
        "getSchedule": ("200", shown),
        "pauseSchedule": ("200", _schedule("paused")),
        "resumeSchedule": ("200", _schedule()),
        "triggerSchedule": (
            "202",
            {"fire": _fire(), "undelivered_sessions": 0, "recorded": True, "delivered": True},
        ),
        "removeSchedule": ("200", _schedule("removed")),
        "listRemovedSchedules": ("200", {"schedules": [_schedule("removed")]}),
        "getRemovedSchedule": ("200", {**_schedule("removed"), "fires": [_fire()]}),
        "getUsage": (
            "200",
            {"since": "2026-11-30T18:00:00+00:00", "priced": True, "jobs": jobs, "total": _USAGE},
        ),
        "getMetricsLinks": (
            "200",
            {
                "links": [{"name": "flower", "url": "http://fleet:5555"}],
                "metrics": ["nahida_provider_tokens_total", "nahida_runs_total"],
                "usage": "/v1/usage",
            },
        ),
    }


def add_examples(document: dict[str, Any]) -> None:
    """Write each operation's request and success examples into ``document``."""
    answers = responses()
    for item in document.get("paths", {}).values():
        for operation in item.values():
            op_id = operation.get("operationId")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and op_id in REQUESTS:
                body["example"] = REQUESTS[op_id]
            if op_id in answers:
                status, example = answers[op_id]
                content = operation["responses"].get(status, {}).get("content", {})
                if "application/json" in content:
                    content["application/json"]["example"] = example
