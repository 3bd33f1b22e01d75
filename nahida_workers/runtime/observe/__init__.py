"""What watchers see of a session (DESIGN.md section 6).

:mod:`.channel` defines the user-visible events, the channel policies that
filter them and the sinks they go to (memory, a Redis stream);
:mod:`.observer` turns what each commit point committed into those events and
into the process's counters.
"""
