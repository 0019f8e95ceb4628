"""Harness for integration tests: real Redis (the session's private server), real Celery workers.

`harness` gives each test fresh registries and a way to start in-process workers and a client against the
private Redis; everything it started is stopped after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.metrics import Metrics
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.root import Runtime
from agentq.runtime.worker import InProcessWorker
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.integration.cluster import LocalCluster
from tests.integration.procs import worker_procs  # noqa: F401  (fixture: separate worker processes)
from tests.integration.rabbitmq import AmqpNames, rabbitmq_required, rabbitmq_url, unreachable_reason
from tests.integration.test_flower import flower  # noqa: F401  (fixture: the real Flower)


def tool_schema(name: str, *, params: dict | None = None, output: dict | None = None, required: list | None = None,
                **meta: Any) -> dict:
    """A minimal valid tool schema; `meta` adds meta fields such as `_scopes` or `_activity`."""
    properties = {"_tool": {"type": "string", "const": name}, **meta, **(params or {}),
                  "_output": output if output is not None else {}}
    schema = {"type": "object", "description": f"{name} (test tool)", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def store_of(owner: Client | Runtime) -> StateStore:
    """The Redis state store behind a client or a runtime, for assertions on what was written (tests only)."""
    store = owner._parts.store if isinstance(owner, Client) else owner.store
    assert isinstance(store, StateStore), f"{type(store).__name__} is not the Redis state store"
    return store


class Harness:
    def __init__(self, redis_url: str, **settings: Any):
        """`settings` override the harness's own (e.g. a cluster store with `redis_cluster`, another broker)."""
        self.settings = Settings(**{"redis_url": redis_url, "heartbeat_s": 1.0, "lease_s": 3.0, **settings})
        self.tools = ToolRegistry()
        self.activities = ActivityRegistry()
        # one process's counters, shared by its runtimes and API servers as `agentq api --embedded` shares its parts'
        self.metrics = Metrics()
        self._workers: list[InProcessWorker] = []
        self._runtimes: list[Runtime] = []
        self._clients: list[Client] = []
        self._closers: list = []

    def on_close(self, close) -> None:
        """Call `close()` when the test ends (after the workers stopped)."""
        self._closers.append(close)

    def tool(self, name: str, **kwargs: Any) -> dict:
        return self.tools.register(name, tool_schema(name, **kwargs))

    def runtime(self, *, activities: ActivityRegistry | None = None, tools: ToolRegistry | None = None,
                **settings: Any) -> Runtime:
        runtime = Runtime(settings=self.settings.model_copy(update=settings) if settings else self.settings,
                          activities=activities if activities is not None else self.activities,
                          tools=tools if tools is not None else self.tools, metrics=self.metrics)
        self._runtimes.append(runtime)
        return runtime

    def worker(self, *, activities: ActivityRegistry | None = None, tools: ToolRegistry | None = None,
               engine: bool = True, concurrency: int = 4, **settings: Any) -> InProcessWorker:
        """Start an in-process worker (threads pool) serving `activities` (default: the harness's)."""
        runtime = self.runtime(activities=activities, tools=tools, **settings)
        serve_activities = len(runtime.activities) > 0
        worker = InProcessWorker(runtime, activities=serve_activities, engine=engine, concurrency=concurrency)
        worker.start()
        self._workers.append(worker)
        return worker

    def client(self, *, tools: ToolRegistry | None = None, tenant: str = "default") -> Client:
        client = Client(settings=self.settings, tools=tools, tenant=tenant)
        self._clients.append(client)
        return client

    def run(self, job: dict, timeout: float = 20.0, *, tenant: str = "default") -> dict:
        """Submit `job` (for `tenant`) with a new client and wait for its record."""
        return self.client(tenant=tenant).submit(job).result(timeout=timeout)

    def close(self) -> None:
        for worker in reversed(self._workers):
            worker.stop()
        for client in self._clients:
            client.close()
        for runtime in self._runtimes:
            runtime.close()
        for close in self._closers:
            close()


@pytest.fixture
def harness(redis_url: str) -> Iterator[Harness]:
    h = Harness(redis_url)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """A Redis server of its own as state store and broker, append-only file synced every second: what the tests
    that restart it from its file start (a store restart loses at most the last second, as in production)."""
    server = RedisServer(appendonly=True, extra_args=("--appendfsync", "everysec")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rabbitmq() -> str:
    """The URL of the RabbitMQ the tests reach; its tests skip with the reason when none answers (they fail
    instead under TEST_REQUIRE_RABBITMQ=1, as in CI)."""
    url = rabbitmq_url()
    reason = unreachable_reason(url)
    if reason is not None:
        if rabbitmq_required():
            pytest.fail(f"TEST_REQUIRE_RABBITMQ is set but {reason}", pytrace=False)
        pytest.skip(f"{reason}; set TEST_RABBITMQ_URL to run the RabbitMQ tests")
    return url


@pytest.fixture
def amqp_names(rabbitmq: str) -> Iterator[AmqpNames]:
    """Queue names of this test's own on the RabbitMQ, deleted when it ends."""
    names = AmqpNames(rabbitmq)
    try:
        yield names
    finally:
        names.cleanup()


@pytest.fixture
def rabbit_harness(redis_url: str, amqp_names: AmqpNames) -> Iterator[Harness]:
    """A harness whose broker is the RabbitMQ (this test's own engine queue), the state store the private Redis."""
    h = Harness(redis_url, broker_url=amqp_names.url, engine_queue=amqp_names.queue("engine"))
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def cluster_harness(local_cluster: LocalCluster, redis_url: str) -> Iterator[Harness]:
    """A harness whose state store is the (flushed) cluster, with the session's plain Redis as the broker."""
    local_cluster.flush()
    h = Harness(local_cluster.url, redis_cluster=True, broker_url=redis_url)
    try:
        yield h
    finally:
        h.close()


from tests.fake_anthropic import anthropic_env, fake_anthropic  # noqa: E402,F401  (fixtures of the agent tests)
