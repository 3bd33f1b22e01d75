"""The submission side: what writes before, or around, any session owner.

:mod:`.preflight` checks a job at every entry point before anything runs;
:mod:`.dispatcher` creates a session durably, then publishes one task for it;
:mod:`.inbox` posts steering, background completions and cancels to a
session's inbox (DESIGN.md section 8); :mod:`.sweeper` (celery beat) repairs
what crashes leave behind and re-publishes what was never published
(DESIGN.md section 1). With :mod:`~nahida_workers.runtime.commits`, these are
the only runtime modules that open a ledger transaction.
"""
