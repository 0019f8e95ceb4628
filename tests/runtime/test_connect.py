"""Unit tests of the connection forms (no server needed): the Sentinel URL, what the store's factory builds for
each form, and the broker in kombu's terms (`store/connect.py`, `runtime/broker.py`). The integration tests
(`tests/integration/test_sentinel.py`, `test_cluster.py`, `test_rabbitmq.py`) run each form for real."""

from __future__ import annotations

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from agentq.errors import ConfigurationError
from agentq.runtime.broker import broker_of
from agentq.settings import Settings
from agentq.store.boundary import redact_url
from agentq.store.connect import POOL_WAIT_S, SentinelUrl, connect_redis, parse_sentinel_url, redact_password
from agentq.store.pinned import PinnedPoolMixin, pinned_threads_for

REDIS_OPTIONS = {"visibility_timeout": 60.0}


def test_a_sentinel_url_names_sentinels_master_db_and_credentials():
    assert parse_sentinel_url("redis+sentinel://s1:26380,s2/mymaster/3") == SentinelUrl(
        sentinels=(("s1", 26380), ("s2", 26379)), master="mymaster", db=3)
    parsed = parse_sentinel_url("redis+sentinel://app:p%40ss@[::1]:5000/m?sentinel_password=s3cret")
    assert parsed == SentinelUrl(sentinels=(("::1", 5000),), master="m", db=0, username="app", password="p@ss",
                                 sentinel_password="s3cret")
    assert parse_sentinel_url("redis+sentinel://:pw@h:1/m/0").password == "pw"


def test_a_bad_sentinel_url_names_every_problem_and_the_form():
    with pytest.raises(ConfigurationError) as caught:
        parse_sentinel_url("redis+sentinel://:hunter2@h:notaport,h2:99999/?colour=red")
    message = str(caught.value)
    for problem in ("'h:notaport' is not host:port", "'h2:99999' is not host:port", "names no master",
                    "unknown parameter(s) colour", "form: redis+sentinel://"):
        assert problem in message
    assert "hunter2" not in message
    with pytest.raises(ConfigurationError, match="names no sentinel"):
        parse_sentinel_url("redis+sentinel:///m/0")
    with pytest.raises(ConfigurationError, match="'x' is not a database number"):
        parse_sentinel_url("redis+sentinel://h/m/x")


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://user:hunter2@h/0", "redis://user:***@h/0"),
    ("redis+sentinel://:hunter2@h1:26379,h2:26379/m/0", "redis+sentinel://:***@h1:26379,h2:26379/m/0"),
    ("redis+sentinel://h1/m?sentinel_password=hunter2", "redis+sentinel://h1/m?sentinel_password=***"),
    ("redis://h:6379/0", "redis://h:6379/0"),
])
def test_passwords_never_show_in_messages(url: str, shown: str):
    assert redact_password(url) == shown == redact_url(url)


def test_the_store_factory_builds_one_client_per_form_without_connecting():
    plain = connect_redis("redis://127.0.0.1:1/4")
    assert type(plain) is redis.Redis and plain.connection_pool.connection_kwargs["db"] == 4
    sentinel = connect_redis("redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/mymaster/2?sentinel_password=sp")
    pool = sentinel.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 2 and pool.connection_kwargs["password"] == "pw"
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["port"], s.connection_pool.connection_kwargs["password"])
            for s in sentinels] == [(1, "sp"), (2, "sp")]
    for client in (plain, sentinel):
        client.close()


def test_a_synchronous_store_client_takes_its_connections_from_a_blocking_pool():
    """A thread that finds them all in use waits for one (tests/integration/test_engine_concurrency.py: 200 threads
    waiting on jobs through 8 connections)."""
    plain = connect_redis("redis://127.0.0.1:1/0", max_connections=3)
    sentinel = connect_redis("redis+sentinel://127.0.0.1:1/mymaster/0", max_connections=5)
    for client, size in ((plain, 3), (sentinel, 5)):
        pool = client.connection_pool
        assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == size
        assert pool.timeout == POOL_WAIT_S
    assert isinstance(sentinel.connection_pool, SentinelConnectionPool)  # still finds the master through sentinels
    # a quarter of the bound keeps a connection per thread; a Sentinel master's pool pins none
    assert isinstance(plain.connection_pool, PinnedPoolMixin) and plain.connection_pool.pinned_threads == 0
    assert not isinstance(sentinel.connection_pool, PinnedPoolMixin)
    for client in (plain, sentinel):
        assert client.auto_close_connection_pool  # closing the client closes its connections
    assert [pinned_threads_for(n) for n in (1, 8, 128, 1024)] == [0, 2, 32, 64]
    for client in (plain, sentinel):
        client.close()


def test_a_cluster_store_needs_a_node_url_with_database_0():
    with pytest.raises(ConfigurationError, match="not a Sentinel URL"):
        connect_redis("redis+sentinel://h/m/0", cluster=True)
    with pytest.raises(ConfigurationError, match="database 0 only"):
        connect_redis("redis://127.0.0.1:7000/2", cluster=True)
    with pytest.raises(ConfigurationError, match="a cluster node's URL"):
        connect_redis("unix:///tmp/redis.sock", cluster=True)


def test_the_broker_in_kombus_terms():
    redis_broker = broker_of(Settings(redis_url="redis://h:6379/0"), redis_options=REDIS_OPTIONS)
    assert (redis_broker.url, redis_broker.transport_options, redis_broker.kind) == (
        "redis://h:6379/0", REDIS_OPTIONS, "redis")

    sentinel = broker_of(Settings(redis_url="redis+sentinel://:p%2Fw@s1:26379,s2:26380/mymaster/1"
                                            "?sentinel_password=sp"), redis_options=REDIS_OPTIONS)
    assert sentinel.url == "sentinel://:p%2Fw@s1:26379/1;sentinel://:p%2Fw@s2:26380/1"
    assert sentinel.transport_options == {**REDIS_OPTIONS, "master_name": "mymaster",
                                          "sentinel_kwargs": {"password": "sp"}}
    assert sentinel.kind == "sentinel"

    rabbit = broker_of(Settings(redis_url="redis://h/0", broker_url="amqp://u:p@rabbit:5672/vh"),
                       redis_options=REDIS_OPTIONS)
    assert (rabbit.url, rabbit.transport_options, rabbit.kind) == (
        "amqp://u:p@rabbit:5672/vh", {"confirm_publish": True}, "amqp")


def test_kombus_own_sentinel_form_is_refused_with_agentqs():
    with pytest.raises(ConfigurationError, match=r"redis\+sentinel://host:26379"):
        broker_of(Settings(broker_url="sentinel://s1:26379;sentinel://s2:26379"), redis_options={})


@pytest.mark.parametrize("broker_url", [None, "redis://node1:7000/0", "redis://:pw@node1:7000"])
def test_a_cluster_store_refuses_its_own_node_as_the_broker(broker_url: str | None):
    settings = Settings(redis_url="redis://node1:7000/0", redis_cluster=True, broker_url=broker_url)
    with pytest.raises(ConfigurationError) as caught:
        broker_of(settings, redis_options={})
    assert "kombu has no Redis Cluster transport" in str(caught.value)
    assert "AGENTQ_BROKER_URL" in str(caught.value) and "pw" not in str(caught.value)


@pytest.mark.parametrize("broker_url", ["redis://other:6379/0", "amqp://guest:guest@rabbit//",
                                        "redis+sentinel://s1:26379/mymaster/0"])
def test_a_cluster_store_takes_a_plain_redis_sentinel_or_rabbitmq_broker(broker_url: str):
    broker = broker_of(Settings(redis_url="redis://node1:7000/0", redis_cluster=True, broker_url=broker_url),
                       redis_options={})
    assert broker.kind in ("redis", "amqp", "sentinel")
