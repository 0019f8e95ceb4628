"""A commit ends its call's lease (commit.lua reads and deletes it in one command): a superseded attempt's commit
leaves the lease of the attempt that took the call over to that attempt, a whole lease long."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.protocol.status import CallStatus
from agentq.store.replies import Claimed, CommitOutcome
from agentq.store.state import StateStore
from tests.runtime.conftest import make_plan, records_of, tool_schema

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}})}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    store = StateStore(redis_url)
    yield store
    store.close()


def test_a_superseded_commit_leaves_the_new_attempts_lease_and_the_winning_commit_ends_it(store: StateStore):
    job = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}
    plan = make_plan(job, TOOLS, job_id="job_lease")
    assert store.create_job(plan, records_of(plan), submitted=job, events=[])
    call_id = plan.calls[0].id
    lease = store.keys("job_lease").lease(call_id)
    assert isinstance(store.claim("job_lease", call_id, token="first", lease_ms=60_000), Claimed)
    store.redis.delete(lease)  # its lease lapsed (its process stopped renewing it)
    taken = store.claim("job_lease", call_id, token="second", lease_ms=60_000)
    assert isinstance(taken, Claimed) and taken.attempt == 2 and taken.lost == 1

    late = store.commit("job_lease", call_id, token="first", status=CallStatus.DONE, lease_ms=45_000)
    assert late.outcome is CommitOutcome.SUPERSEDED
    assert store.redis.get(lease) == "second" and 40_000 < store.redis.pttl(lease) <= 45_000
    assert store.commit("job_lease", call_id, token="first", status=CallStatus.DONE).outcome is \
        CommitOutcome.SUPERSEDED  # a caller that gives no lease length: the default lease
    assert store.redis.get(lease) == "second" and 25_000 < store.redis.pttl(lease) <= 30_000

    assert store.commit("job_lease", call_id, token="second", status=CallStatus.DONE).outcome is \
        CommitOutcome.COMMITTED
    assert store.redis.exists(lease) == 0
    assert store.commit("job_lease", call_id, token="second", status=CallStatus.DONE).outcome is \
        CommitOutcome.DUPLICATE
