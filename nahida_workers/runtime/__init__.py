"""The runtime: drives the pure core over the ports (DESIGN.md section 9).

Grouped by what a reader looks for. :mod:`.ownership` is one delivery while it
holds the lease (lease → epoch → recover → loop → terminal → release);
:mod:`.commits` holds every commit point of an owner, by name, and nothing else
in the runtime's owner path opens a transaction; :mod:`.fanout` executes tool
calls (one call and its receipt, bounded threads, parallel batches, streaming
pre-start); :mod:`.children` is the runtime side of child sessions (spawn,
views, resume, worktrees, what a seal does to them); :mod:`.dispatch` is the
submission side that writes before any owner runs (dispatcher, inbox posts,
preflight, the sweeper); :mod:`.observe` is what watchers see (channels, sinks,
counters). Beside them: :mod:`.spec` (what a user asks for), :mod:`.artifacts`
(prompts too large for an event row) and :mod:`.wiring` (settings become
adapters). Every import names the module it uses: the packages re-export
nothing, so importing one module never imports its siblings.
"""
