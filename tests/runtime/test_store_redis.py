"""What only the Redis store can show: how many round trips its steps take, and how it recovers from a Redis
that lost its scripts. (The behaviour both stores share is in `test_store_contract.py`.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.protocol.envelopes import JobQueued
from agentq.store.state import StateStore
from tests.redis_trips import RoundTrips
from tests.runtime.conftest import make_plan, records_of, tool_schema

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}})}
JOB = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    store = StateStore(redis_url)
    yield store
    store.close()


def create(store: StateStore, job_id: str) -> bool:
    plan = make_plan(JOB, TOOLS, job_id=job_id)
    return store.create_job(plan, records_of(plan), submitted=JOB,
                            events=[JobQueued(job_id=plan.id, kind="plan", calls=1)])


def test_a_submission_is_one_round_trip_with_its_listing(store: StateStore):
    assert create(store, "job_zero")  # a Redis that never ran the script loads it first (NOSCRIPT, see below)
    trips = RoundTrips(store.redis)
    assert create(store, "job_one")
    # the job's script, its listing and its entry among the active jobs (metrics), and their trims
    assert trips.requests == [["EVALSHA", "ZADD", "ZADD", "ZREMRANGEBYSCORE", "ZREMRANGEBYSCORE"]]
    assert store.redis.zscore(store.fleet.active_jobs, "job_one") is not None
    listed_at = store.redis.zscore(store.fleet.jobs, "job_one")

    trips.take()
    assert not create(store, "job_one")  # the id is taken: nothing written, its listing unchanged
    assert len(trips.requests) == 1
    assert store.redis.zscore(store.fleet.jobs, "job_one") == listed_at
    assert store.recent_jobs() == ["job_one", "job_zero"]


def test_a_redis_that_lost_its_scripts_still_takes_a_submission(store: StateStore):
    store.redis.script_flush()
    trips = RoundTrips(store.redis)
    assert create(store, "job_after_flush")
    assert [request[0] for request in trips.requests] == ["EVALSHA", "EVALSHA", "SCRIPT LOAD", "EVALSHA"]
    assert store.job_status("job_after_flush").value == "queued"
    assert store.recent_jobs() == ["job_after_flush"]


def test_old_listings_are_trimmed_by_the_next_submission(store: StateStore):
    store.redis.zadd(store.fleet.jobs, {"job_ancient": 1.0})
    assert create(store, "job_new")
    assert store.recent_jobs() == ["job_new"]


def test_only_calls_that_wait_have_a_waiting_count(store: StateStore):
    """A job of independent calls stores no waiting count per call (issue 11: bytes per call)."""
    job = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"},
                     {"_tool": "first", "x": "†state.a", "_outputPath": "†state.b"},
                     {"_tool": "first", "x": 2, "_outputPath": "†state.c"}]}
    plan = make_plan(job, TOOLS, job_id="job_waits")
    assert store.create_job(plan, records_of(plan), submitted=job, events=[])
    second = plan.calls[1].id
    assert store.redis.hgetall(store.keys(plan.id).waiting) == {second: "1"}
