"""Executing tool calls: one call, a bounded thread, a parallel batch (DESIGN.md sections 3 and 5).

:mod:`.calls` runs one call and writes its receipt (the same code on every
path, remote tool workers included); :mod:`.bounded` runs it on its own thread
so a stuck tool is abandoned at its timeout; :mod:`.executor` is the executor
port and the inline executor; :mod:`.parallel` fans a concurrency-safe batch
out over local threads and the ``tools`` queue and gathers it in provider
order, from the started calls of :mod:`.pending`; :mod:`.prestart` starts safe
calls while the provider still streams and aborts them on a provider fallback.
"""
