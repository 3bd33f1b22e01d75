"""The Redis broker transport, with one kombu fault worked around.

After a Redis restart every session worker exited at once: ``Unrecoverable
error: AttributeError("'NoneType' object has no attribute 'hostname'")``.
The sequence (kombu 5.7, celery 5.7, reproduced in
``tests/unit/test_broker_transport.py`` and with real workers in
``tests/integration/test_hostile_input.py``):

1. the consumer's event loop has a BRPOP outstanding on the default channel,
   which also holds the unacknowledged messages of running tasks (acks_late);
2. Redis goes away; Celery's ``on_connection_error_after_connected`` calls
   ``Connection.collect()``: closing the default channel first reads the
   BRPOP reply, which raises a connection error *before* the channel is
   marked closed; closing the next channel raises too (its unacked messages
   cannot be restored), which ends ``Transport.close_connection`` early; and
   ``collect`` then detaches the transport (``transport.client = None``);
3. Celery then calls ``connection.close()``: the half-closed default channel
   is closed again and tries to restore its unacked messages, building a
   Redis client from ``transport.client.hostname`` -- an ``AttributeError``,
   which is not one of the connection errors Celery ignores there, so the
   worker process exits.  A late ``ack`` of a task that ends after the
   restart meets the same ``AttributeError``.

The workaround: a channel whose transport was detached raises a Redis
``ConnectionError`` when it needs a connection -- the error every kombu and
Celery layer already handles (the close is finished, the ack is logged as
failed; the message was lost with the old server or is redelivered).
:func:`install` makes it the transport of ``redis://`` and ``rediss://``.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

__all__ = ["Channel", "Transport", "install"]


class Channel(kombu_redis.Channel):
    """kombu's Redis channel; a detached one fails with a connection error."""

    def _connparams(self, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is None or getattr(transport, "client", None) is None:
            raise redis.exceptions.ConnectionError(
                "the broker connection was closed (collected after a connection error)"
            )
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


def install() -> None:
    """Use :class:`Transport` for ``redis://`` and ``rediss://`` broker URLs in this process."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
