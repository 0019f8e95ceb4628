"""Fixtures of the runtime unit tests: a `StateStore` on the session's private Redis (its Python side on a clock the
test moves), and a store of each kind for the contract tests (Redis, Redis Cluster)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import pytest

from agentq.engine.executor import Executor, Outcome
from agentq.engine.routing import Routing
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.jobs import JobPlan, plan_job
from agentq.protocol.records import CallRecord
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.service import JobService
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.fleet import RedisFleet
from agentq.store.limits import RedisLimits
from agentq.store.state import StateStore
from agentq.store.tenants import RedisTenants
from tests.runtime.clock import ManualClock


def tool_schema(name: str, params: dict | None = None, **meta: Any) -> dict:
    """A minimal valid tool schema."""
    return {"type": "object", "description": f"{name} (test tool)",
            "properties": {"_tool": {"type": "string", "const": name}, **meta, **(params or {}), "_output": {}}}


def make_plan(job: dict, tools: dict[str, dict], *, job_id: str | None = None) -> JobPlan:
    """A planned job whose tools are all served by live activities of the same name."""
    return plan_job(job, tools=tools, live_activities={name: {} for name in tools}, job_id=job_id)


def records_of(plan: JobPlan) -> list[CallRecord]:
    return [c.record().routed(f"agentq.activity.{c.activity}", f"agentq.activity.{c.activity}") for c in plan.calls]


class Recorder:
    """A dispatcher that keeps the records it was asked to send, for the test to run."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, CallRecord]] = []
        self.ticks: list[str] = []
        self.revoked: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()

    def __call__(self, job_id: str, records: list[CallRecord]) -> None:
        with self._lock:
            self.sent += [(job_id, r) for r in records]

    def tick(self, job_id: str, n: int = 0) -> None:
        self.ticks.append(job_id)

    def ended(self, job_id: str, call_ids: list[str], released: list[CallRecord]) -> None:
        self(job_id, released)  # no admission here: every released call is sent

    def revoke(self, job_id: str, call_ids: list[str], run: int = 1) -> None:
        self.revoked.append((job_id, list(call_ids)))

    def ids(self) -> list[str]:
        return [r.id for _, r in self.sent]


S = TypeVar("S", bound=Store)


class Rig(Generic[S]):
    """A job service and an executor sharing one store (a StateStore on the session's Redis) and one
    recording dispatcher."""

    def __init__(self, store: S, settings: Settings | None = None, **executor: Any):
        self.store = store
        conn = cast(StateStore, store)  # the store's connection, which its fleet-wide parts share
        self.dispatcher = Recorder()
        self.tools = ToolRegistry()
        self.activities = ActivityRegistry()
        settings = settings if settings is not None else Settings()
        self.service = JobService(store, self.dispatcher, settings=settings, routing=Routing.from_settings(settings),
                                  tools=self.tools, activities=self.activities, local_activities_are_live=True,
                                  fleet=RedisFleet(conn), tenants=RedisTenants(conn))
        # executor options that are settings (lease_s, default_timeout_s, ...) go into its settings
        overrides = {k: executor.pop(k) for k in list(executor) if k in Settings.model_fields}
        executor_settings = settings.model_copy(update={"lease_s": 30.0, "default_timeout_s": 5.0,
                                                        "max_result_bytes": 1_000_000, **overrides})
        executor.setdefault("limits", RedisLimits(conn))  # as the composition root wires it
        self.executor = Executor(store, self.activities, self.dispatcher, settings=executor_settings, **executor)
        self.runs: Counter[str] = Counter()
        self.outcomes: list[tuple[str, Outcome]] = []
        self._next = 0

    def activity(self, name: str, fn: Any, params: dict | None = None, **options: Any) -> None:
        self.tools.register(name, tool_schema(name, params if params is not None else {}))

        def counted(call: dict) -> Any:
            self.runs[name] += 1
            return fn(call)

        if asyncio.iscoroutinefunction(fn):
            async def counted_async(call: dict) -> Any:
                self.runs[name] += 1
                return await fn(call)

            self.activities.register(name, counted_async, **options)
        else:
            self.activities.register(name, counted, **options)

    def submit(self, job: dict) -> str:
        return self.service.submit(job)

    def drain(self, limit: int = 50) -> list[str]:
        """Run every dispatched record not run yet (retries run again at once); the outcomes' statuses."""
        statuses: list[str] = []
        while self._next < len(self.dispatcher.sent) and limit:
            job_id, record = self.dispatcher.sent[self._next]
            outcome = self.executor.run_call(job_id, record.id, record=record)
            self.outcomes.append((record.tool, outcome))
            statuses.append(outcome.status)
            limit -= 1
            if outcome.status != "retry":
                self._next += 1
        return statuses

    def call_id(self, job_id: str, tool: str) -> str:
        return next(i for i, r in self.store.call_records(job_id).items() if r.tool == tool)

    def events(self, job_id: str) -> list[dict]:
        return [e for _, e in self.store.read_events(job_id)]

    def named(self, job_id: str, name: str) -> list[dict]:
        return [e for e in self.events(job_id) if e["event"] == name]


@dataclass
class Backend:
    """A store under test and how to let time pass for it (real time: its Lua steps read Redis's clock)."""

    name: str
    store: Any  # a StateStore; its steps' replies are unions the tests read as the reply they expect
    advance: Callable[[float], None]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def redis_store(redis_url: str, clock: ManualClock) -> Iterator[StateStore]:
    """A `StateStore` on the session's private Redis (flushed for the test), its Python side on `clock`."""
    store = StateStore(redis_url, clock=clock)
    try:
        yield store
    finally:
        store.close()


def expire_now(store: StateStore, key: str) -> None:
    """Let a key's TTL run out now (a lease's, a claim's), as time passing would: PEXPIRE 1 ms, then wait until Redis
    expired it."""
    store.redis.pexpire(key, 1)
    deadline = time.monotonic() + 5
    while store.redis.exists(key):
        assert time.monotonic() < deadline, f"{key} did not expire"
        time.sleep(0.001)


def job_keys(store: StateStore) -> list[str]:
    """Every hash-tagged key in the store (each job's, `<namespace>:{<job id>}:...`, and the fleet's tagged ones):
    none when nothing was written."""
    return sorted(store.redis.scan_iter(match=f"{store.namespace}:{{*}}:*"))


def expire_job(store: StateStore, job_id: str) -> None:
    """Let the job's keys expire now, as its TTL running out would."""
    keys = store.keys(job_id)
    store.redis.delete(*keys.all, keys.done, keys.tick_lease)


@pytest.fixture(params=["redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "cluster":  # the same contract on a three-node Redis Cluster
        cluster = request.getfixturevalue("local_cluster")
        cluster.flush()
        store = StateStore(cluster.url, cluster=True)
    else:
        store = StateStore(request.getfixturevalue("redis_url"))
    try:
        yield Backend(request.param, store, time.sleep)
    finally:
        store.close()
