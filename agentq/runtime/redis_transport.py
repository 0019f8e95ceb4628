"""kombu's Redis transport, repaired so a worker survives losing its Redis broker for a while.

When the broker connection drops while a worker polls for tasks and holds unacknowledged ones (always, with late
acks), Celery's consumer first collects the connection — its transport forgets the connection it belonged to —
and then closes it again. That second close tries to put the unacknowledged tasks back through a connection
pool the channel can no longer build (an `AttributeError` Celery does not expect), and the worker stops with
"Unrecoverable error". Acknowledging a task that ran through the outage fails the same way, so the broker
would deliver it again after the visibility timeout.

This channel remembers the connection it was opened for and builds its pool from it when its transport has
forgotten it: the close only fails on the unreachable server (an error Celery expects: it reconnects), and a
task that finished after the broker came back is acknowledged. `create_app` installs it as the transport of
`redis://` and `rediss://` URLs (`install()`: the URLs, what Flower and the logs show of them, stay as they
are); with a Redis broker on the state store's server, that is what lets a store outage pass (see
`engine/outages.py`).

Its channels can also build a publication without sending it (`captured_publications`): inside, a publish batch
keeps each message's Redis commands, for the admission step to push itself (`runtime/pushed.py`).

Its acknowledgement emulation (`QoS`) notes a delivered task unacknowledged with one command (HSET of the task and
the time into the unacknowledged hash; kombu's adds a ZADD into a time index, in a MULTI/EXEC transaction) and
acknowledges it with one (HDEL; kombu's: ZREM and HDEL in a transaction), shared by the tasks a channel acknowledges
within `ACK_FLUSH_S`: one command per task and a fraction instead of eight.
Its look for tasks unacknowledged longer than the visibility timeout reads their times from the hash (and kombu's
index still, for the tasks a process of an earlier version noted there).

Where the broker is the state store's Redis (the transport option `STORE_RECOVERS_CALLS`, set by the composition
root), an activity call's task delivered for now (no ETA) is not noted at all: the store holds the call's state, and
the admission's sweep sends the task again when its process dies (a call still `ready` a heartbeat after its
admission, or `running` with its lease gone, whose task the broker holds nowhere: `runtime/admission_sweep.py`).
What the process hands back itself (a lost pool child, a task that cannot reach the store, a shutdown) is put back
from the message it holds. That spares every call an HSET its consumer waits for, and the HDEL of its
acknowledgement.

It is installed as a kombu transport alias, the one process-wide change agentq makes, because kombu offers no
per-app way that keeps working: with Celery's `broker_transport` set to this class's path, kombu renders the
broker URL with that path as its scheme (`Connection.as_uri`: the worker's banner, and Flower, which picks its
broker client by the scheme, could no longer show queue lengths), and a connection that fails over to its next
URL (`Connection.switch`, the Sentinel transport's `;`-separated sentinels) takes its transport from that URL's
scheme again, dropping the repair. The alias only replaces kombu's own transport for the scheme (never one a
host program set) and changes nothing else kombu does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from time import time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps, loads

from agentq.protocol.records import ACTIVITY_TASK_PREFIX

log = logging.getLogger("agentq.runtime")

STORE_RECOVERS_CALLS = "agentq_store_recovers_calls"
"""A transport option: the broker is the state store's Redis, whose admission sweep sends an activity call's task
again when the process that took it died, so such a task is not noted unacknowledged (`QoS`)."""

TRANSPORT = "agentq.runtime.redis_transport:Transport"
_KOMBU_REDIS = "kombu.transport.redis:Transport"


def install() -> None:
    """Make `redis://` and `rediss://` URLs use this transport in this process (idempotent; an alias another
    part of the process set to something else than kombu's own transport is left alone)."""
    for scheme in ("redis", "rediss"):
        use_transport(scheme, kombu_default=_KOMBU_REDIS, ours=TRANSPORT)


def use_transport(scheme: str, *, kombu_default: str, ours: str) -> None:
    """Alias `scheme` to the transport `ours`, unless something other than kombu's `kombu_default` holds it."""
    import kombu.transport

    if kombu.transport.TRANSPORT_ALIASES.get(scheme) in (kombu_default, ours):
        kombu.transport.TRANSPORT_ALIASES[scheme] = ours
        # a class kombu resolved for the scheme before is cached: resolve it again
        getattr(kombu.transport, "_transport_cache", {}).pop(scheme, None)


class RemembersConnection:
    """A kombu Redis channel that remembers the kombu Connection it was opened for and gives it back to its
    transport when a lost connection made the transport forget it (see the module's docstring)."""

    connection: Any

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._opened_for = self.connection.client  # the kombu Connection this channel's transport served

    def _restore_connection(self) -> None:
        if self.connection.client is None and self._opened_for is not None:
            self.connection.client = self._opened_for  # collected after a lost connection: as it was opened

    def _connparams(self, asynchronous: bool = False) -> Any:
        self._restore_connection()
        return super()._connparams(asynchronous)  # type: ignore[misc]


class SharesClient:
    """A kombu Redis channel that keeps one client for its short commands (an acknowledgement, a published task
    or event) instead of building a `redis.Redis` for each: building one sets up its response callbacks, which
    cost more than the command itself, and a dispatcher acknowledges and publishes from hundreds of threads. A
    client takes a connection from its pool per command, so threads share it safely; a new pool (after a lost
    connection) gets a new client."""

    pool: Any
    _create_client: Any  # kombu's Channel's
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()
        yield shared


Commands = list[tuple[str, tuple[Any, ...]]]  # the Redis commands of one publication: (name, arguments)

_capturing = threading.local()


@contextmanager
def captured_publications() -> Iterator[list[Commands]]:
    """Inside, a publish batch this thread opens on a channel of this transport (`Producer.batch`) sends nothing:
    it keeps the Redis commands of each publication (an LPUSH of the message to its queue's list), in order, in the
    list yielded. A batch opened before, or on another transport, is not affected (it sends)."""
    kept: list[Commands] = []
    previous = getattr(_capturing, "kept", None)
    _capturing.kept = kept
    try:
        yield kept
    finally:
        _capturing.kept = previous


class CapturesPublications:
    """A kombu Redis channel whose publish batches keep their commands inside `captured_publications()`."""

    def create_publish_batch(self, max_size: int) -> Any:
        kept = getattr(_capturing, "kept", None)
        if kept is not None:
            return _KeptBatch(self, kept)
        return super().create_publish_batch(max_size)  # type: ignore[misc]


class _KeptBatch:
    """A publish batch that keeps each publication's commands (kombu's `PublishBatch` interface)."""

    def __init__(self, channel: Any, kept: list[Commands]):
        self.channel = channel
        self.kept = kept
        self._collecting: Commands | None = None

    def publish(self, message: Any, **kwargs: Any) -> Any:
        commands: Commands = []
        self._collecting = commands
        try:
            return self.channel.basic_publish(message, _publish_batch=self, **kwargs)
        finally:
            self._collecting = None
            self.kept.append(commands)

    def add(self, name: str, *args: Any) -> None:
        if self._collecting is None:
            raise RuntimeError("a Redis publish command added outside a publication")
        self._collecting.append((name, args))

    def flush(self) -> None:
        """Nothing to send."""

    def discard(self) -> None:
        """Nothing was sent."""

    def close(self) -> None:
        """Nothing held."""


ACK_FLUSH_S = 0.05
"""How long an acknowledged task's unacknowledged entry may outlive its acknowledgement: the entries of the tasks a
channel acknowledges meanwhile are deleted in one HDEL."""

ACK_RETRY_S = 1.0
"""How long acknowledgements whose HDEL failed (Redis out of reach) wait before the next try."""


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's acknowledgement emulation in one command per write: a delivered task is noted unacknowledged by an HSET
    of `[message, exchange, routing key, time noted]` into the unacknowledged hash (kombu's entry, the time added:
    kombu also ZADDs the time into an index, `unacked_index`), before it runs; acknowledgements delete their entries
    `ACK_FLUSH_S` after the first of them, in one HDEL (kombu's: ZREM and HDEL per task), and when the channel closes.
    Nothing uses MULTI/EXEC. An entry outlives its acknowledgement by that long at most, unless the process is killed
    meanwhile: then the task is put back after the visibility timeout, as it would be had it been killed while the
    task ran (a call task's next delivery finds its call committed).

    `restore_visible` (under kombu's lock, as kombu's) puts back the entries noted longer ago than the visibility
    timeout, their times read from the hash itself (HSCAN), and those kombu's index holds (noted by a process of an
    earlier version). Every put-back is kombu's `restore_by_tag`, whose transaction WATCHes the hash: an
    acknowledgement's HDEL between its read and its EXEC aborts it, and it reads again (it finds nothing to
    restore).

    With `STORE_RECOVERS_CALLS`, an activity call's task to run now is not noted (`_unnoted`: its tag, this process
    only): its acknowledgement deletes nothing, and a put-back (`restore_by_tag`: a reject with requeue, a channel
    closed with it) writes the message it holds back to its queue (`_put_back`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        options = getattr(self.channel.connection.client, "transport_options", None) or {}
        self._store_recovers = bool(options.get(STORE_RECOVERS_CALLS))
        self._unnoted: set[str] = set()  # delivered tasks the store recovers: not in the unacknowledged hash

    def append(self, message: Any, delivery_tag: str) -> None:
        if self._store_recovers and _recovered_by_store(message):
            self._unnoted.add(delivery_tag)
        else:
            delivery = message.delivery_info
            entry = dumps([message._raw, delivery["exchange"], delivery["routing_key"], time()])
            with self.channel.conn_or_acquire() as client:
                client.hset(self.unacked_key, delivery_tag, entry)
        virtual.QoS.append(self, message, delivery_tag)

    _acks: list[str] | None = None  # acknowledged, their entries not deleted yet (made on first use)
    _flush_due = 0  # the process that scheduled a flush of `_acks` (a forked child's timer is not running)
    _acks_lock = threading.Lock()  # guards both (one lock for every channel of the process: held for a list op)

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag in self._unnoted:  # nothing to delete
            self._unnoted.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        with self._acks_lock:
            if self._acks is None:
                self._acks = []
            self._acks.append(delivery_tag)
        self._flush_in(ACK_FLUSH_S)
        virtual.QoS.ack(self, delivery_tag)

    def _flush_in(self, seconds: float) -> None:
        """Schedule a flush of the acknowledgements, unless one is due already."""
        with self._acks_lock:
            if self._flush_due == os.getpid():
                return
            self._flush_due = os.getpid()
        timer = threading.Timer(seconds, self.flush_acks)
        timer.daemon = True
        timer.start()

    def flush_acks(self) -> None:
        """Delete the entries of the tasks acknowledged since the last flush, in one HDEL (of 1000 at most each).
        When Redis cannot be reached they are kept, and tried again `ACK_RETRY_S` later while the channel is open
        (closed, they are put back after the visibility timeout, as kombu's failed acknowledgements are)."""
        with self._acks_lock:
            tags, self._acks, self._flush_due = self._acks or [], [], 0
        if not tags:
            return
        try:
            with self.channel.conn_or_acquire() as client:
                for first in range(0, len(tags), 1000):
                    client.hdel(self.unacked_key, *tags[first:first + 1000])
        except Exception:
            log.warning("could not acknowledge %d tasks on the broker", len(tags), exc_info=True)
            if not self.channel.closed:
                with self._acks_lock:
                    self._acks = tags + (self._acks or [])
                self._flush_in(ACK_RETRY_S)

    def restore_unacked_once(self, stderr: Any = None) -> Any:
        self.flush_acks()  # what was acknowledged is not put back
        return super().restore_unacked_once(stderr)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.restore_by_tag(delivery_tag, leftmost=True)
            virtual.QoS.ack(self, delivery_tag)
        else:
            self.ack(delivery_tag)

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        if pipe:
            yield pipe
        else:
            with self.channel.conn_or_acquire(client) as client:
                yield client.pipeline(transaction=False)

    def restore_visible(self, start: int = 0, num: int | None = 10, interval: int = 10) -> None:
        self._vrestore_count += 1
        if (self._vrestore_count - 1) % (interval or 1):
            return
        with self.channel.conn_or_acquire() as client:
            ceil = time() - self.visibility_timeout
            try:
                with kombu_redis.Mutex(client, self.unacked_mutex_key, self.unacked_mutex_expire):
                    # noted by a process of an earlier version: in kombu's index
                    indexed = client.zrange(self.unacked_index_key, ceil, 0, desc=True, byscore=True,
                                            offset=num and start, num=num, withscores=True)
                    for tag, _ in indexed or []:
                        self.restore_by_tag(tag, client)
                    acknowledged = set(self._acks or ())  # their entries about to be deleted
                    for tag in _noted_before(client, self.unacked_key, ceil, num):
                        if tag not in acknowledged:
                            self.restore_by_tag(tag, client)
            except kombu_redis.MutexHeld:
                pass

    def restore_by_tag(self, tag: str, client: Any = None, leftmost: bool = False) -> None:
        if tag in self._unnoted:
            self._put_back(tag, client, leftmost)
            return

        def restore_transaction(pipe: Any) -> None:
            entry = pipe.hget(self.unacked_key, tag)
            pipe.multi()
            pipe.zrem(self.unacked_index_key, tag).hdel(self.unacked_key, tag)
            if entry:
                message, exchange, routing_key = loads(entry)[:3]
                self.channel._do_restore_message(message, exchange, routing_key, pipe, leftmost)

        with self.channel.conn_or_acquire(client) as client:
            client.transaction(restore_transaction, self.unacked_key)

    def _put_back(self, tag: str, client: Any, leftmost: bool) -> None:
        """Put a task that was not noted back on its queue, from the message this process holds (kombu's own way
        of putting back a noted one, the entry read from the message)."""
        self._unnoted.discard(tag)
        delivered: Any = self._delivered  # kombu's: the messages this channel holds, by tag
        message = delivered.get(tag)
        if message is None:
            return
        delivery = message.delivery_info
        with self.channel.conn_or_acquire(client) as client:
            pipe = client.pipeline(transaction=False)
            self.channel._do_restore_message(message._raw, delivery["exchange"], delivery["routing_key"], pipe,
                                             leftmost)
            pipe.execute()


def _recovered_by_store(message: Any) -> bool:
    """Whether the store's sweep recovers `message`'s task: an activity call's, to run now (a task held for later,
    a retry's countdown, would be taken for lost and sent early)."""
    headers = message.headers or {}
    return str(headers.get("task", "")).startswith(ACTIVITY_TASK_PREFIX) and not headers.get("eta")


def _new_acks_lock() -> None:
    QoS._acks_lock = threading.Lock()  # a forked child's: the parent's may have been held by another thread


os.register_at_fork(after_in_child=_new_acks_lock)


def _noted_before(client: Any, key: str, ceil: float, limit: int | None) -> list[str]:
    """The tags of the unacknowledged hash's entries noted before `ceil` (s since the epoch; an entry without its
    time, written by a process of an earlier version, is kombu's index's), `limit` at most (None: all)."""
    tags: list[str] = []
    for tag, entry in client.hscan_iter(key, count=500):
        noted = noted_at(entry)
        if noted is not None and noted < ceil:
            tags.append(tag.decode() if isinstance(tag, bytes) else tag)
            if limit and len(tags) >= limit:
                break
    return tags


def noted_at(entry: bytes | str) -> float | None:
    """When an unacknowledged entry was noted (its last item: `QoS.append`), None when it has no time."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    comma = text.rfind(",")
    try:
        return float(text[comma + 1:].rstrip(" ]"))
    except ValueError:
        return None


class Channel(RemembersConnection, SharesClient, CapturesPublications, kombu_redis.Channel):  # type: ignore[misc]
    QoS = QoS


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
