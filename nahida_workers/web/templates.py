# ruff: noqa: E501  (HTML templates read better unwrapped)
"""Jinja2 templates of the web view (autoescaped; loaded from this dict, no files to package)."""

from __future__ import annotations

__all__ = ["TEMPLATES"]

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}nahida{% endblock %}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
code, .id { font-family: monospace; white-space: nowrap; }
.completed { color: #2a7a2a; } .failed { color: #b22; } .unverified, .incomplete { color: #a60; }
.cancelled { color: #808; } nav a { margin-right: 1em; }
pre { white-space: pre-wrap; max-width: 70em; margin: 0; }
</style></head><body>
<nav><a href="/">batches</a><a href="/docs">API</a></nav>
{% block body %}{% endblock %}
</body></html>"""

_INDEX = """{% extends "base.html" %}{% block title %}nahida: batches{% endblock %}
{% block body %}<h1>Batches</h1>
<table id="batches"><tr><th>batch</th><th>job</th><th>created</th><th>sessions</th><th>done</th></tr>
{% for b in batches %}<tr><td class="id"><a href="/batches/{{ b.batch_id }}">{{ b.batch_id }}</a></td>
<td>{{ b.job }}</td><td>{{ b.created_at[:19] }}</td><td>{{ b.sessions }}</td><td>{{ b.done }}</td></tr>
{% else %}<tr><td colspan="5">no batches yet</td></tr>{% endfor %}</table>
{% if sessions %}<h2>Sessions outside a batch</h2><table id="sessions">
<tr><th>session</th><th>workspace</th><th>status</th><th>created</th></tr>
{% for s in sessions %}<tr><td class="id"><a href="/sessions/{{ s.session_id }}">{{ s.session_id }}</a></td>
<td>{{ s.workspace }}</td><td>{{ s.status.value }}</td><td>{{ s.created_at.isoformat()[:19] }}</td></tr>
{% endfor %}</table>{% endif %}{% endblock %}"""

_BATCH = """{% extends "base.html" %}{% block title %}batch {{ report.batch_id }}{% endblock %}
{% block body %}<h1>Batch <span class="id">{{ report.batch_id }}</span> ({{ report.job }})</h1>
<p>{{ report.sessions|length }} sessions:
{% for state, n in report.summary.items() %}{{ n }} {{ state }}{% if not loop.last %}, {% endif %}{% endfor %}</p>
<table id="sessions"><tr><th>session</th><th>workspace</th><th>state</th><th>reason</th>
<th>turns</th><th>tool calls</th><th>run s</th><th>runs</th><th>latest run</th></tr>
{% for r in report.sessions %}{% set state = r.terminal_state or r.status %}
<tr><td class="id"><a href="/sessions/{{ r.session_id }}">{{ short[r.session_id] }}</a></td>
<td>{{ r.workspace }}</td><td class="{{ state }}">{{ state }}</td><td>{{ r.reason or "-" }}</td>
<td>{{ r.turns }}</td><td>{{ r.tool_calls }}</td>
<td>{{ "%.2f"|format(r.seconds) if r.seconds is not none else "-" }}</td><td>{{ r.runs }}</td>
<td class="id">{% if r.run_id %}<a href="/runs/{{ r.run_id }}">{{ short[r.run_id] }}</a>{% else %}-{% endif %}</td></tr>
{% endfor %}</table>{% endblock %}"""

_SESSION = """{% extends "base.html" %}{% block title %}session {{ session.session_id }}{% endblock %}
{% block body %}<h1>Session <span class="id">{{ session.session_id }}</span></h1>
<p>workspace <code>{{ session.workspace }}</code>, status {{ session.status.value }},
epoch {{ session.lease_epoch }}{% if session.batch_id %}, batch
<a class="id" href="/batches/{{ session.batch_id }}">{{ session.batch_id }}</a>{% endif %}
{% if session.parent_id %}, parent <a class="id" href="/sessions/{{ session.parent_id }}">{{ session.parent_id }}</a>{% endif %}</p>
<h2>Runs</h2><table id="runs"><tr><th>run</th><th>state</th><th>reason</th><th>started</th><th>ended</th></tr>
{% for r in runs %}{% set state = r.terminal_state.value if r.terminal_state else "open" %}
<tr><td class="id"><a href="/runs/{{ r.run_id }}">{{ r.run_id }}</a></td><td class="{{ state }}">{{ state }}</td>
<td>{{ r.terminal_reason.value if r.terminal_reason else "-" }}</td>
<td>{{ r.started_at.isoformat()[:23] }}</td><td>{{ r.ended_at.isoformat()[:23] if r.ended_at else "-" }}</td></tr>
{% endfor %}</table>
<h2>Children</h2>{% if children %}<table id="children"><tr><th>session</th><th>workspace</th><th>status</th></tr>
{% for c in children %}<tr><td class="id"><a href="/sessions/{{ c.session_id }}">{{ c.session_id }}</a></td>
<td>{{ c.workspace }}</td><td>{{ c.status.value }}</td></tr>{% endfor %}</table>
{% else %}<p>no child sessions</p>{% endif %}{% endblock %}"""

_RUN = """{% extends "base.html" %}{% block title %}run {{ run.run_id }}{% endblock %}
{% block body %}{% set state = run.terminal_state.value if run.terminal_state else "open" %}
<h1>Run <span class="id">{{ run.run_id }}</span></h1>
<p>session <a class="id" href="/sessions/{{ run.session_id }}">{{ run.session_id }}</a>,
{{ run.provider }}/{{ run.model }}, <span class="{{ state }}">{{ state }}</span>
{{ run.terminal_reason.value if run.terminal_reason else "" }}, trace <code>{{ run.trace_id }}</code></p>
<h2>Timeline</h2><p>{{ overlaps }} overlapping tool-call pair(s)</p>
<div id="timeline">{{ svg }}</div>
<h2>Events</h2><table id="events"><tr><th>#</th><th>type</th><th>call</th><th>epoch</th><th>at</th><th>payload</th></tr>
{% for e in events %}<tr><td>{{ e.sequence }}</td><td>{{ e.type.value }}</td><td class="id">{{ e.call_id or "" }}</td>
<td>{{ e.epoch }}</td><td>{{ e.created_at.isoformat()[11:23] if e.created_at else "" }}</td>
<td><pre>{{ e.payload.as_json()|tojson|truncate(600) }}</pre></td></tr>{% endfor %}</table>{% endblock %}"""

_LOGIN = """{% extends "base.html" %}{% block title %}nahida: log in{% endblock %}
{% block body %}<h1>Log in</h1>
{% if problem %}<p class="failed" id="problem">{{ problem }}</p>{% endif %}
{% if needed %}<form method="post" action="/login">
<label>API token (NAHIDA_API_TOKEN) <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Log in</button></form>
<p>The browser keeps the token in an HttpOnly cookie for this site.</p>
{% else %}<p>This server has no token: nothing to log in to. <a href="/">Go on</a>.</p>{% endif %}
{% endblock %}"""

TEMPLATES = {
    "base.html": _BASE,
    "index.html": _INDEX,
    "batch.html": _BATCH,
    "session.html": _SESSION,
    "run.html": _RUN,
    "login.html": _LOGIN,
}
