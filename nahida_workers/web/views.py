"""What each console page shows: one context builder per page, shared by the page and its stream.

A :class:`View` names its template, the function that reads its context from
the ledger (given the page's key -- a session id, a run id -- and its query
parameters) and its live regions: the template's blocks the event stream
re-renders (:mod:`nahida_workers.web.live`).  The page and the stream call
the same builder, so a live update is exactly what a reload would show.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import HTTPException
from markupsafe import Markup

from nahida_workers.cli.ids import resolve
from nahida_workers.core.events import EventType, SessionStatus
from nahida_workers.ledger.children import child_ledger
from nahida_workers.spend import (
    batch_usage,
    jobs_usage,
    prices_of,
    run_usage,
    sessions_usage,
    usage_line,
)
from nahida_workers.web import queries as q
from nahida_workers.web import trees
from nahida_workers.web.conversation import conversation
from nahida_workers.web.dashboard import next_fire_of, read_dashboard
from nahida_workers.web.placements import placements_of
from nahida_workers.web.probe import BrokerProbe
from nahida_workers.web.reasons import explain
from nahida_workers.web.timeline import bars_of, origin_of, overlapping_pairs, timeline_svg
from nahida_workers.web.waits import child_bars, wait_bars

__all__ = ["SPEND_TTL_S", "Console", "View", "checked"]

#: Seconds the dashboard reuses its spend-per-job totals (see :meth:`Console.spend`).
SPEND_TTL_S = 30.0

MAX_PARAM = 64


def checked(value: str, *, what: str = "id") -> str:
    """``value`` if it can be an id, a name or a filter (1-64 printable ASCII); else a 404."""
    if not value or len(value) > MAX_PARAM or not value.isascii() or not value.isprintable():
        raise HTTPException(404, f"no such {what}")
    return value


def _page_number(params: Mapping[str, str]) -> int:
    raw = params.get("page", "1")
    return int(raw) if raw.isdigit() and len(raw) < 7 else 1


def _filter_value(params: Mapping[str, str], name: str) -> str:
    value = params.get(name, "")
    return checked(value, what=name) if value else ""


@dataclass(frozen=True)
class View:
    """A page: its template, its context builder ``(key, params) -> dict``, its live blocks."""

    template: str
    build: Callable[[str, Mapping[str, str]], dict[str, Any]]
    regions: tuple[str, ...]


class Console:
    """The console's pages over one fleet (``nahida serve``'s).

    Args:
        fleet: the server's fleet (its ledger, clock and settings).
        probe: the broker probe (queue depths, workers).
    """

    def __init__(self, fleet: Any, probe: BrokerProbe) -> None:
        self.fleet = fleet
        self.ledger = fleet.ledger
        self.engine = fleet.ledger.reader
        self.probe = probe
        self._spend: tuple[float, dict[str, Any]] | None = None  # (monotonic s, jobs_usage)
        self.views: dict[str, View] = {
            "dashboard": View("dashboard.html", self.dashboard, ("dash",)),
            "sessions": View("sessions.html", self.sessions, ("rows",)),
            "batches": View("batches.html", self.batches, ("rows",)),
            "batch": View("batch.html", self.batch, ("summary", "rows")),
            "session": View("session.html", self.session, ("summary", "runs", "tree", "inbox")),
            "run": View("run.html", self.run, ("summary", "timeline", "conversation")),
            "schedules": View("schedules.html", self.schedules, ("rows",)),
            "schedule": View("schedule.html", self.schedule, ("summary", "fires")),
            "teams": View("teams.html", self.teams, ("rows",)),
            "team": View("team.html", self.team, ("members", "tasks")),
        }

    def schedule_store(self) -> Any:
        """The schedule store over the ledger's engine (what ``nahida schedule`` uses)."""
        from nahida_workers.schedules.sql import SqlScheduleStore

        return SqlScheduleStore(self.ledger.engine)

    # -- lists ---------------------------------------------------------------------

    def prices(self) -> Any:
        """The price table (``NAHIDA_PRICES_FILE``); None when there is none or it is broken.

        A broken table is the CLI's error to report (``nahida status`` exits 2 on
        it); the console shows tokens without a cost rather than fail a page.
        """
        try:
            return prices_of(self.fleet.settings)
        except Exception:  # ConfigError: shown as "no cost", never a 500
            return None

    def dashboard(self, _key: str, _params: Mapping[str, str]) -> dict[str, Any]:
        """Sessions by state, the last hour, queues, workers, schedules due next, spend per job.

        Spend: tokens (and the estimated cost, with a price table) per job over
        the last 24 hours (:func:`nahida_workers.spend.jobs_usage`; docs/operating/usage.md).
        """
        now = self.fleet.clock.now()
        return {"d": read_dashboard(self.ledger, self.probe, now), "spend": self.spend(now)}

    def spend(self, now: datetime) -> dict[str, Any]:
        """Spend per job over the 24 hours before ``now``, read at most every :data:`SPEND_TTL_S`.

        The live dashboard re-renders every second; the totals read every turn
        of a day's runs, and a minute-old total is as useful as a fresh one.
        """
        at = time.monotonic()
        if self._spend is None or at - self._spend[0] >= SPEND_TTL_S:
            since = now - timedelta(hours=24)
            self._spend = (at, jobs_usage(self.ledger, since=since, table=self.prices()))
        return self._spend[1]

    def sessions(self, _key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of sessions under the filters of ``params``."""
        state = params.get("state", "")
        if state and state not in q.STATES:
            raise HTTPException(404, f"no such state (one of {', '.join(q.STATES)})")
        flt = q.SessionFilter(
            state=state,
            job=_filter_value(params, "job"),
            batch=_filter_value(params, "batch"),
            schedule=self._schedule_id(_filter_value(params, "schedule")),
            parent=_filter_value(params, "parent"),
        )
        page = q.session_page(self.engine, flt, page=_page_number(params))
        return {
            "page": page,
            "filters": flt,
            "states": q.STATES,
            "jobs": q.distinct_jobs(self.engine),
            "schedules": self.schedule_store().live(),
        }

    def _schedule_id(self, ref: str) -> str:
        """A schedule filter by name or id, as its id ('' stays '')."""
        if not ref:
            return ""
        found = self.schedule_store().get(ref)
        return str(found.schedule_id) if found is not None else ref

    def batches(self, _key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of batches (schedule fires included, each naming its schedule)."""
        flt = q.BatchFilter(
            job=_filter_value(params, "job"),
            schedule=self._schedule_id(_filter_value(params, "schedule")),
        )
        return {
            "page": q.batch_page(self.engine, flt, page=_page_number(params)),
            "filters": flt,
            "jobs": q.distinct_jobs(self.engine),
            "schedules": self.schedule_store().live(),
        }

    def batch(self, key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """A batch: its state counts and a page of its sessions."""
        full = resolve(self.ledger, "batch", checked(key))
        batch = self.ledger.get_batch(full)
        flt = q.SessionFilter(batch=full, state=params.get("state", ""))
        if flt.state and flt.state not in q.STATES:
            raise HTTPException(404, "no such state")
        return {
            "batch": batch,
            "usage": usage_line(batch_usage(self.ledger, full, self.prices())),
            "counts": q.state_counts(self.engine, q.SessionFilter(batch=full)),
            "page": q.session_page(self.engine, flt, page=_page_number(params)),
            "filters": flt,
        }

    def schedules(self, _key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """Every live schedule: state, trigger, last fire, next fire."""
        store, now = self.schedule_store(), self.fleet.clock.now()
        rows = []
        for schedule in store.live():
            last = store.fires(schedule.schedule_id, limit=1)
            rows.append(
                {
                    "s": schedule,
                    "next_fire": next_fire_of(schedule, now),
                    "last": last[0] if last else None,
                }
            )
        number = _page_number(params)
        size = q.PAGE_SIZE
        page = q.Page(rows[(number - 1) * size : number * size], number, len(rows))
        return {"page": page, "filters": q.BatchFilter()}

    def schedule(self, key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """A schedule and a page of its fires."""
        from nahida_workers.web.actions import find_schedule

        schedule = find_schedule(self.schedule_store(), checked(key))
        now = self.fleet.clock.now()
        return {
            "s": schedule,
            "next_fire": next_fire_of(schedule, now),
            "page": trees.fire_page(self.engine, schedule.schedule_id, page=_page_number(params)),
            "filters": q.BatchFilter(),
        }

    def teams(self, _key: str, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of teams."""
        return {"page": trees.team_page(self.engine, page=_page_number(params)), "filters": None}

    def team(self, key: str, _params: Mapping[str, str]) -> dict[str, Any]:
        """A team's members and tasks."""
        detail = trees.team_detail(self.engine, checked(key))
        if detail is None:
            raise HTTPException(404, f"no team {key}")
        return {"team": detail}

    # -- one session, one run ------------------------------------------------------------

    def session(self, key: str, _params: Mapping[str, str]) -> dict[str, Any]:
        """A session: its runs, its tree of child sessions, its inbox."""
        full = resolve(self.ledger, "session", checked(key))
        session = self.ledger.get_session(full)
        assert session is not None
        runs = self.ledger.runs_of(full)
        latest = runs[-1] if runs else None
        state = q.session_state(
            session.status.value,
            latest.terminal_state.value if latest and latest.terminal_state else None,
        )
        usage = sessions_usage(self.ledger, [full], self.prices())[full].as_json()
        return {
            "session": session,
            "state": state,
            "usage": usage_line(usage),
            "runs": runs,
            "tree": trees.session_tree(self.engine, full),
            "inbox": self.ledger.inbox(full),
            "link": child_ledger(self.ledger).link(full),
            "can_cancel": session.status is not SessionStatus.DONE,
        }

    def run(self, key: str, _params: Mapping[str, str]) -> dict[str, Any]:
        """A run: the conversation, the timeline with its waits, the terminal state in words."""
        full = resolve(self.ledger, "run", checked(key))
        run = self.ledger.get_run(full)
        assert run is not None
        svg, overlaps, events = self.timeline(full)
        return {
            "run": run,
            "usage": usage_line(run_usage(self.ledger, run, self.prices())),
            "items": conversation(events, self.ledger.receipts(full)),
            "svg": Markup(svg),  # built from escaped parts by timeline_svg
            "overlaps": overlaps,
            "explanation": explain(
                run.terminal_state.value if run.terminal_state else None,
                run.terminal_reason.value if run.terminal_reason else None,
            ),
        }

    def timeline(self, run_id: str) -> tuple[str, int, list[Any]]:
        """The run's SVG timeline (work, waits and child lanes), its overlap count, its events."""
        run = self.ledger.get_run(run_id)
        assert run is not None
        session = self.ledger.get_session(run.session_id)
        placement = placements_of(session.config, self.fleet.settings) if session else {}
        events = self.ledger.events(run_id)
        receipts = self.ledger.receipts(run_id)
        if not events:
            return timeline_svg([], title=f"run {run_id}"), 0, events
        origin = min(origin_of(events, receipts), run.started_at)
        work = bars_of(events, receipts, placement=placement, origin=origin)
        calls = [
            e.call_id
            for e in events
            if e.type is EventType.TOOL_CALL and e.call_id and e.payload.get("name") == "Task"
        ]
        kids = trees.children_by_call(self.engine, run.session_id) if calls else {}
        bars = [
            *wait_bars(events, run.started_at, origin),
            *work,
            *child_bars(kids, calls, origin),
        ]
        return timeline_svg(bars, title=f"run {run_id}"), overlapping_pairs(work), events
