"""Fixtures of the runtime unit tests: the in-memory store, and a store of each kind for the contract tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentq.protocol.jobs import JobPlan, plan_job
from agentq.protocol.records import CallRecord
from tests.runtime.memory_store import ManualClock, MemoryStore


def tool_schema(name: str, params: dict | None = None, **meta: Any) -> dict:
    """A minimal valid tool schema."""
    return {"type": "object", "description": f"{name} (test tool)",
            "properties": {"_tool": {"type": "string", "const": name}, **meta, **(params or {}), "_output": {}}}


def make_plan(job: dict, tools: dict[str, dict], *, job_id: str | None = None) -> JobPlan:
    """A planned job whose tools are all served by live activities of the same name."""
    return plan_job(job, tools=tools, live_activities={name: {} for name in tools}, job_id=job_id)


def records_of(plan: JobPlan) -> list[CallRecord]:
    return [c.record().routed(f"agentq.activity.{c.activity}", f"agentq.activity.{c.activity}") for c in plan.calls]


@dataclass
class Backend:
    """A store under test and how to let time pass for it (sleep on Redis, advance the clock in memory)."""

    name: str
    store: Any
    advance: Callable[[float], None]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def memory_store(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture(params=["redis", "memory"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        clock = ManualClock()
        yield Backend("memory", MemoryStore(clock=clock), clock.advance)
        return
    from agentq.store.state import StateStore

    store = StateStore(request.getfixturevalue("redis_url"))
    try:
        yield Backend("redis", store, time.sleep)
    finally:
        store.close()
