"""Control facts decided in the ledger, without a worker slot (DESIGN.md section 8).

:mod:`.cancel` seals a cancelled session no worker holds (and its subtree)
in the canceller's own transaction; :mod:`.timers` fires the durable
deadlines of waiting sessions from beat's sweep; both write through
:mod:`.seal`, the out-of-owner seal.
"""
