"""The store's connection pool with its per-thread fast path (`store/pinned.py`), against real Redis servers: a
thread keeps one connection, only a bounded number of threads do and all stay within `max_connections`, a thread
that ends gives its connection back, a forked child never uses its parent's socket, an unread reply is never
read by the next command, nested use takes another connection, closing the client closes every connection,
a Sentinel store pins nothing and follows a failover, and an outage is a `StoreUnavailableError`."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from agentq.embedded import RedisServer
from agentq.errors import StoreUnavailableError
from agentq.store.connect import connect_redis
from agentq.store.connection import StoreConnection
from tests.integration.cluster import SentinelGroup
from tests.integration.procs import wait_for

pytestmark = pytest.mark.timeout(120)
NAME = "agentq-pool-test"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    made = connect_redis(redis_url, max_connections=8, client_name=NAME)  # up to 2 threads pin a connection
    try:
        yield made
    finally:
        made.close()


def server_connections(url: str) -> int:
    """The connections the server has from the client under test (named NAME)."""
    with redis.Redis.from_url(url) as observer:
        return sum(1 for c in observer.client_list() if c.get("name") == NAME)


def idle(pool: Any) -> int:
    return sum(1 for c in pool.pool.queue if c is not None)


def test_a_thread_keeps_one_connection(client: Any):
    pool = client.connection_pool
    first = client.client_id()
    for i in range(50):
        client.set(f"k{i}", i)
        assert client.get(f"k{i}") == str(i)
    assert client.client_id() == first
    assert pool.pinned == 1 and len(pool._connections) == 1 and idle(pool) == 0  # the queue never had it back


def test_few_threads_pin_all_stay_within_the_bound_and_an_ended_thread_gives_its_connection_back(
        client: Any, redis_url: str):
    pool = client.connection_pool
    assert pool.pinned_threads == 2
    threads = 16
    started, done = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    ids: dict[int, set[int]] = {}

    def work(index: int) -> None:
        started.wait()
        ids[index] = {client.client_id() for _ in range(30)}
        client.incr("count", 30)
        done.wait()  # every thread alive while the main thread counts
        done.wait()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    started.wait()
    done.wait()
    assert pool.pinned == 2
    assert len(pool._connections) <= 8 and server_connections(redis_url) <= 8
    assert sum(1 for seen in ids.values() if len(seen) == 1) >= 2  # the pinned threads used one connection each
    done.wait()
    for worker in workers:
        worker.join()
    gc.collect()
    assert pool.pinned == 0  # the ended threads' pins were given back ...
    assert idle(pool) == len(pool._connections)  # ... and their connections are in the queue again
    assert client.get("count") == str(threads * 30)
    assert pool.pinned == 1  # the next thread pins one


def test_a_forked_child_uses_its_own_connection(client: Any):
    parent = client.client_id()
    client.set("who", "parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connection, never the parent's socket
        try:
            child = client.client_id()
            client.set("who", "child")
            os.write(write, str(child).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = int(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    assert child != parent
    assert client.get("who") == "child"
    assert client.client_id() == parent  # the parent's connection is intact and still its own


def test_a_reply_left_unread_is_not_read_by_the_next_command(client: Any):
    client.mset({"a": "A", "b": "B"})
    pool = client.connection_pool
    connection = pool.get_connection()  # the thread's pinned one
    connection.send_command("GET", "a")  # interrupted before its reply was read ...
    assert connection.can_read(timeout=10)  # ... which came
    pool.release(connection)
    assert client.get("b") == "B"
    assert pool.pinned == 1


def test_a_held_connection_leaves_other_commands_another(client: Any):
    client.set("k", "1")
    pinned = client.client_id()
    with client.pipeline() as pipe:
        pipe.watch("k")  # the pipeline holds the thread's connection
        assert pipe.client_id() == pinned
        assert client.get("k") == "1" and client.client_id() != pinned  # another one, from the queue
        pipe.multi()
        pipe.set("k", "2")
        assert pipe.execute() == [True]
    assert client.get("k") == "2" and client.client_id() == pinned


def test_disconnecting_the_idle_connections_reconnects_the_pinned_ones_before_their_next_command(client: Any):
    """What a Sentinel pool does when a connection finds the master moved (`get_master_address`): its idle
    connections are closed, and a pinned one counts as idle between its commands."""
    pool = client.connection_pool
    with ThreadPoolExecutor(1) as other:
        before = {client.client_id(), other.submit(client.client_id).result()}
        pool.disconnect(inuse_connections=False)
        after = {client.client_id(), other.submit(client.client_id).result()}
        assert len(after) == 2 and not before & after
        assert other.submit(client.client_id).result() in after  # once: pinned again, on the new connection
    gc.collect()
    assert pool.pinned == 1  # the executor's thread ended: its pin was given back


def test_closing_the_client_closes_every_connection(redis_url: str):
    client = connect_redis(redis_url, max_connections=8, client_name=NAME)

    def hold_one(_: int) -> None:
        with client.pipeline() as pipe:
            pipe.watch("k")  # holds a connection (its thread's pinned one, or one from the queue) ...
            hold.wait()  # ... while the other threads hold theirs: four at once, none handed from one to another

    with ThreadPoolExecutor(4) as threads:
        hold = threading.Barrier(4)
        list(threads.map(hold_one, range(4)))
        assert server_connections(redis_url) == 4  # 2 pinned, 2 from the queue
        client.close()
        wait_for(lambda: server_connections(redis_url) == 0, 10, "the server to see every connection closed")


def test_an_outage_is_store_unavailable_and_a_pinned_connection_recovers():
    with RedisServer() as server:
        store = StoreConnection(server.url)
        store.ping()
        pin = store.redis.connection_pool._local.pin
        server.halt()
        with pytest.raises(StoreUnavailableError, match="cannot reach the state store"):
            store.ping()
        server.start()  # the same port
        store.ping()
        assert store.redis.connection_pool._local.pin is pin and pin.connection.is_connected
        store.close()


def test_a_sentinel_store_is_not_pinned_and_follows_a_failover():
    """A Sentinel store's pool pins nothing (a pinned connection reconnecting mid-failover found no master). After
    `SENTINEL FAILOVER` (the old master becomes a replica and keeps its connections) a writer and a reader that did
    nothing during the failover both reach the new master."""
    with SentinelGroup() as group:
        client = connect_redis(group.url)
        with ThreadPoolExecutor(1) as writer, ThreadPoolExecutor(1) as reader:
            writer.submit(client.set, "k", "before").result()
            assert reader.submit(client.execute_command, "ROLE").result()[0] == "master"
            old = group.master_port()
            new = group.failover()
            assert new != old
            writer.submit(client.set, "k", "after").result()
            assert reader.submit(client.execute_command, "ROLE").result()[0] == "master"
            assert reader.submit(client.get, "k").result() == "after"
            assert not hasattr(client.connection_pool, "pinned")
        client.close()
        with redis.Redis(port=new) as promoted:
            assert promoted.get("k") == b"after"
