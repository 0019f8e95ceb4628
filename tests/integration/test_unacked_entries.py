"""The Redis transport's acknowledgement emulation (`runtime/redis_transport.py`, `QoS`): a delivered task is noted
unacknowledged with one HSET, its time in the entry, and acknowledged with one HDEL; the look for tasks to restore
puts back those noted longer ago than the visibility timeout, from the hash's times and from kombu's index (where a
process of an earlier version noted them), and leaves the others. Where the broker is the store's Redis
(`STORE_RECOVERS_CALLS`), an activity call's task to run now is not noted: what the process hands back is put back
from the message it holds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from agentq.runtime import redis_transport
from agentq.runtime.redis_transport import STORE_RECOVERS_CALLS, install, noted_at
from tests.integration.procs import wait_for


@contextmanager
def _channel(redis_url: str, queue: str, visibility_timeout: float = 60.0, **options: Any) -> Iterator[Any]:
    install()
    with Connection(redis_url, transport_options={"visibility_timeout": visibility_timeout, **options}) as connection:
        channel = connection.default_channel
        Queue(queue, Exchange(queue), routing_key=queue)(channel).declare()
        yield channel


def _deliver(channel: Any, queue: str, body: str, **headers: Any) -> Any:
    """Publish `body` to `queue` (with task message `headers`) and take it as a consumer does."""
    channel.basic_publish(channel.prepare_message(body, headers=headers), exchange=queue, routing_key=queue)
    return _take(channel, queue)


def _take(channel: Any, queue: str) -> Any:
    """Take the next task of `queue` as a consumer does (noted unacknowledged, unless the store recovers it)."""
    message = channel.basic_get(queue, no_ack=False)
    assert message is not None
    return message


def _queued(client: Any, channel: Any, queue: str) -> list[tuple[bytes, bool]]:
    """The bodies on `queue`, oldest first, each with whether it is marked redelivered."""
    messages = [json.loads(m) for m in reversed(client.lrange(queue, 0, -1))]
    return [(channel.decode_body(m["body"], "base64"), m["headers"].get("redelivered", False)) for m in messages]


CALL = {"task": "agentq.activity.procA", "id": "job.call"}  # an activity call's task, to run now


def test_an_activity_calls_task_the_store_recovers_is_not_noted_and_its_ack_deletes_nothing(
        redis_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(redis_transport, "ACK_FLUSH_S", 60.0)
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue, **{STORE_RECOVERS_CALLS: True}) as channel:
        hsets, hdels = _calls(client, "hset"), _calls(client, "hdel")
        call = _deliver(channel, queue, "call", **CALL)
        later = _deliver(channel, queue, "later", **CALL, eta="2026-11-30T12:00:00+00:00")  # a retry's countdown
        tick = _deliver(channel, queue, "tick", task="agentq.tick", id="job.tick.1")  # the engine's: not admitted
        assert _calls(client, "hset") == hsets + 2  # the call's task alone is not noted
        assert set(client.hkeys("unacked")) == {later.delivery_tag.encode(), tick.delivery_tag.encode()}
        for message in (call, later, tick):
            message.ack()
        channel.qos.flush_acks()
        assert client.hlen("unacked") == 0 and _calls(client, "hdel") == hdels + 1
        assert channel.qos._unnoted == set()


def test_without_the_option_an_activity_calls_task_is_noted_as_any_other(redis_url: str):
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue) as channel:  # a broker that is not the store's Redis
        call = _deliver(channel, queue, "call", **CALL)
        assert client.hkeys("unacked") == [call.delivery_tag.encode()]
        call.ack()


def test_a_task_not_noted_and_handed_back_is_put_back_on_its_queue_from_the_message_held(redis_url: str):
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue, **{STORE_RECOVERS_CALLS: True}) as channel:
        lost_child = _deliver(channel, queue, "lost child", **CALL)
        lost_child.reject(requeue=True)  # a pool child died under it (reject on worker lost), or a hand-back
        assert _queued(client, channel, queue) == [(b"lost child", True)]
        assert client.hlen("unacked") == 0 and channel.qos._unnoted == set()
        again = _take(channel, queue)
        assert (again.body, again.headers["redelivered"]) == (b"lost child", True)
        again.ack()
        dropped = _deliver(channel, queue, "dropped", **CALL)
        dropped.reject(requeue=False)
        assert _queued(client, channel, queue) == []
        held = _deliver(channel, queue, "held at shutdown", **CALL)
    # closed with a task it held: put back, as kombu puts back the ones it noted
    assert _queued(client, channel, queue) == [(b"held at shutdown", True)]
    assert held.delivery_tag not in client.hkeys("unacked")


def test_a_delivery_is_one_hset_with_its_time_and_acknowledgements_one_hdel(redis_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(redis_transport, "ACK_FLUSH_S", 60.0)  # flushed here, not by the timer
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue) as channel:
        before = time.time()
        messages = [_deliver(channel, queue, body) for body in ("a", "b", "c")]
        tag = messages[0].delivery_tag
        entry = client.hget("unacked", tag)
        assert entry is not None and client.zscore("unacked_index", tag) is None  # no index entry
        raw, exchange, routing_key, noted = json.loads(entry)
        assert (exchange, routing_key) == (queue, queue) and raw["properties"]["delivery_tag"] == tag
        assert noted_at(entry) == noted and before <= noted <= time.time()
        hdels = _calls(client, "hdel")
        for message in messages:
            message.ack()
        assert client.hlen("unacked") == 3 and _calls(client, "hdel") == hdels  # deleted within ACK_FLUSH_S
        channel.qos.flush_acks()
        assert client.hlen("unacked") == 0 and _calls(client, "hdel") == hdels + 1


def test_what_was_acknowledged_is_deleted_when_the_channel_closes_and_not_put_back(redis_url: str,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(redis_transport, "ACK_FLUSH_S", 60.0)
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue) as channel:
        done, held = _deliver(channel, queue, "done"), _deliver(channel, queue, "held")
        done.ack()
    # closed: the acknowledged task's entry deleted, the other task put back on its queue
    assert client.hlen("unacked") == 0
    assert [channel.decode_body(json.loads(m)["body"], "base64") for m in client.lrange(queue, 0, -1)] == [b"held"]
    assert held.delivery_tag not in client.hkeys("unacked")


def _calls(client: Any, command: str) -> int:
    """How many times Redis has run `command` (INFO commandstats)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_the_restore_puts_back_what_was_noted_before_the_visibility_timeout_only(redis_url: str):
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue, visibility_timeout=30) as channel:
        old, fresh = _deliver(channel, queue, "old"), _deliver(channel, queue, "fresh")
        entry = json.loads(client.hget("unacked", old.delivery_tag))
        entry[3] -= 31  # noted 31 s ago
        client.hset("unacked", old.delivery_tag, json.dumps(entry))
        # noted by an earlier version: kombu's entry without its time, and its index
        legacy = _deliver(channel, queue, "legacy")
        kombus = json.loads(client.hget("unacked", legacy.delivery_tag))[:3]
        client.hset("unacked", legacy.delivery_tag, json.dumps(kombus))
        client.zadd("unacked_index", {legacy.delivery_tag: time.time() - 31})
        assert noted_at(client.hget("unacked", legacy.delivery_tag)) is None
        channel.qos.restore_visible(num=None, interval=1)
        back = [channel.decode_body(json.loads(m)["body"], "base64") for m in client.lrange(queue, 0, -1)]
        assert sorted(back) == [b"legacy", b"old"]
        assert client.hkeys("unacked") == [fresh.delivery_tag.encode()]
        assert client.zcard("unacked_index") == 0


def test_acknowledgements_redis_refused_are_deleted_on_the_next_try(redis_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(redis_transport, "ACK_FLUSH_S", 60.0)
    monkeypatch.setattr(redis_transport, "ACK_RETRY_S", 0.05)
    queue = f"test.unacked.{uuid.uuid4().hex[:8]}"
    client: Any = redis.Redis.from_url(redis_url)
    with _channel(redis_url, queue) as channel:
        message = _deliver(channel, queue, "a")
        message.ack()
        acquire = channel.conn_or_acquire

        @contextmanager
        def unreachable(client: Any = None) -> Iterator[Any]:
            channel.conn_or_acquire = acquire  # the next try reaches Redis
            raise redis.ConnectionError("the broker is out of reach")
            yield  # a generator

        channel.conn_or_acquire = unreachable
        channel.qos.flush_acks()  # refused: kept, tried again ACK_RETRY_S later
        assert client.hget("unacked", message.delivery_tag) is not None
        wait_for(lambda: client.hlen("unacked") == 0, 10, "the acknowledgement to be tried again")
