"""One session delivery while this process owns the lease (DESIGN.md sections 3 and 4).

Read in order: :mod:`.session` takes the lease and bumps the epoch
(``SessionRunner``) over the ports of :mod:`.delivery`; :mod:`.owner` recovers
the open run, claims inbox input and loops run after run; :mod:`.driver`
performs the pure loop's decisions for one run until its terminal state;
:mod:`.heartbeat` renews the lease meanwhile; :mod:`.hooks` asks user stop
hooks whether a run may stop; :mod:`.history` is what a later run starts from;
:mod:`.outcome` and :mod:`.redelivery` say how a delivery ended and whether the
broker must deliver the session again.
"""
