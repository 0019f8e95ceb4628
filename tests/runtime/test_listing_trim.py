"""The fleet's job listings (every tenant's, a named tenant's, the active jobs) stay bounded while most submissions
carry no trim of their own: a process trims each at most once a second (`RedisJobs._trim_due`)."""

from __future__ import annotations

import pytest

from agentq.store.jobs import JOB_LISTING_S, TRIM_EVERY_S
from agentq.store.state import StateStore
from tests.redis_trips import RoundTrips
from tests.runtime.clock import ManualClock
from tests.runtime.test_store_redis import create

pytestmark = pytest.mark.timeout(10)


def test_the_listings_are_trimmed_at_most_once_a_second_and_stay_bounded(redis_store: StateStore, clock: ManualClock):
    """A process trims each fleet-wide listing of its expired entries (a job listed longer than `JOB_LISTING_S`, an
    active job past its expiry) with a submission at most once a second, so most submissions carry no trim."""
    store = redis_store
    acme = store.fleet.tenant_jobs("acme")
    assert create(store, "job_zero", tenant="acme")  # trims all three now
    old = clock() - JOB_LISTING_S - 1
    store.redis.zadd(store.fleet.jobs, {"job_old": old})
    store.redis.zadd(acme, {"job_old": old})
    store.redis.zadd(store.fleet.active_jobs, {"job_expired": clock() - 1})
    trips = RoundTrips(store.redis)
    clock.advance(TRIM_EVERY_S / 2)
    assert create(store, "job_one", tenant="acme")
    assert trips.take() == [["EVALSHA"]]  # within the second: no trim (the script lists the job)
    assert store.recent_jobs(tenant="acme") == ["job_one", "job_zero", "job_old"]
    trips.take()
    clock.advance(TRIM_EVERY_S / 2)
    assert create(store, "job_two", tenant="acme")
    assert trips.take() == [["EVALSHA", "ZREMRANGEBYSCORE", "ZREMRANGEBYSCORE", "ZREMRANGEBYSCORE"]]
    assert store.recent_jobs(tenant="acme") == ["job_two", "job_one", "job_zero"]
    assert store.recent_jobs() == ["job_two", "job_one", "job_zero"]
    assert store.redis.zscore(store.fleet.active_jobs, "job_expired") is None
    assert store.redis.zscore(store.fleet.active_jobs, "job_two") is not None
    trips.take()
    assert create(store, "job_three")
    assert trips.take() == [["EVALSHA"]]


def test_the_script_lists_a_written_job_with_its_scores_and_a_refused_id_changes_nothing(
        redis_store: StateStore, clock: ManualClock):
    """On a single Redis, submit.lua adds the job to the listings (ZADD NX) once it wrote it: the fleet's and a named
    tenant's by when it was submitted, the active jobs by its expiry, the approvals when a call is held."""
    from tests.runtime.conftest import make_plan, records_of
    from tests.runtime.test_store_redis import JOB, TOOLS

    store = redis_store
    held = make_plan({**JOB, "options": {"approval": ["first"]}}, TOOLS, job_id="job_held")
    assert store.create_job(held, records_of(held), submitted=JOB, events=[], tenant="acme")
    now = clock()
    expire_at_ms = int(store.redis.hget(store.keys("job_held").job, "expire_at_ms"))
    assert store.redis.zscore(store.fleet.jobs, "job_held") == now
    assert store.redis.zscore(store.fleet.tenant_jobs("acme"), "job_held") == now
    assert store.redis.zscore(store.fleet.active_jobs, "job_held") == expire_at_ms / 1000
    assert store.redis.zscore(store.fleet.approval_jobs, "job_held") == now
    clock.advance(5)
    trips = RoundTrips(store.redis)
    assert not store.create_job(held, records_of(held), submitted=JOB, events=[], tenant="globex")
    assert trips.take()[0][0] == "EVALSHA"
    assert store.redis.zscore(store.fleet.jobs, "job_held") == now  # as they were
    assert store.redis.zscore(store.fleet.approval_jobs, "job_held") == now
    assert store.recent_jobs(tenant="globex") == []
    assert create(store, "job_plain")  # no call held: not among the approvals
    assert store.redis.zscore(store.fleet.approval_jobs, "job_plain") is None
    assert store.recent_jobs() == ["job_plain", "job_held"]
