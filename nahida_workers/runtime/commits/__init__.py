"""Every commit point of a session owner, by name (DESIGN.md sections 3, 4 and 8).

:mod:`.points` is the only module of the owner path that opens a ledger
transaction: the epoch bump (``take_over``), the turn, each batch's results,
parking, the seal and the hand-back are named methods there, each one
transaction. :mod:`.outage` retries a read or a commit point through a short
ledger outage without ever applying a commit twice, and :mod:`.pause_points`
is the test-only pause a crash test kills a worker at, between two commits.
"""
