"""kombu's Redis Sentinel transport, repaired so a worker survives its broker's failover.

When the master dies, the broker connection drops while the worker polls for tasks and holds unacknowledged
ones (always, with late acks). Celery's consumer first collects the connection — its transport forgets the
connection it belonged to — and then closes it again; that second close tries to put the unacknowledged tasks
back through a connection pool the channel can no longer build (an `AttributeError` Celery does not expect), and
the worker stops with "Unrecoverable error". Acknowledging a task that ran through the failover fails the same
way, so the broker would deliver it again after the visibility timeout.

This channel remembers the connection it was opened for and builds its pool from it when its transport has
forgotten it: the close only fails on the unreachable master (an error Celery expects: it reconnects through
the sentinels), and a task that finished after the failover is acknowledged on the new master. `create_app`
installs it as the transport of kombu's `sentinel://` URLs (`install()`, an alias, so it also holds after kombu
switches from one sentinel's URL to the next).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

from agentq.runtime.redis_transport import RemembersConnection, SharesClient, use_transport

TRANSPORT = "agentq.runtime.sentinel_transport:SentinelTransport"
_KOMBU_SENTINEL = "kombu.transport.redis:SentinelTransport"


def install() -> None:
    """Make `sentinel://` URLs use this transport in this process (idempotent; an alias another part of the
    process set to something else than kombu's own transport is left alone)."""
    use_transport("sentinel", kombu_default=_KOMBU_SENTINEL, ours=TRANSPORT)


class SentinelChannel(RemembersConnection, SharesClient, kombu_redis.SentinelChannel):  # type: ignore[misc]
    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        self._restore_connection()  # the sentinels are read from the connection's URLs
        return super()._sentinel_managed_pool(asynchronous)


class SentinelTransport(kombu_redis.SentinelTransport):  # type: ignore[misc]
    Channel = SentinelChannel
