"""The store contract, continued: a copied job (continue, fork) is written in submit.lua's one step with the log and
exchanges it copied, byte for byte, its counters and lineage; its source is read in one round trip (410 once the
source expired, 404 for one never submitted); threads and forks are listed with the longest expiry of their jobs.
Asserted on `StateStore` on the session's private Redis and on a Redis Cluster."""

from __future__ import annotations

import pytest

from agentq.errors import JobExpiredError, JobNotFoundError
from agentq.protocol.continuation import Seed
from agentq.protocol.digests import dumps
from agentq.protocol.envelopes import JobQueued
from tests.runtime.conftest import Backend, make_plan
from tests.runtime.test_store_contract import TOOLS
from tests.runtime.test_store_contract_steps import AGENT, agent

EXCHANGE = {"log_length": 1, "tool_use_id": "toolu_1", "solution": {"calls": [], "output": {"x": 1}}, "problems": []}


def test_a_copy_is_written_with_its_seed_in_one_step_and_its_source_read_whole(backend: Backend):
    store = backend.store
    source_id = agent(store)
    store.redis.rpush(store.keys(source_id).exchanges, dumps(EXCHANGE))
    source = store.copy_source(source_id)
    assert source.submitted == AGENT and source.exchanges == (dumps(EXCHANGE),)
    assert [m for m in source.log] == store.redis.lrange(store.keys(source_id).log, 0, -1)

    plan = make_plan({"context": [{"type": "text", "text": "and then?"}]}, TOOLS)
    seed = Seed(log=(*source.log, dumps(plan.context[0])), exchanges=source.exchanges,
                fields={"ticks": 0, "exchanges": 1, "lineage": dumps({"continued_from": source_id,
                                                                      "thread": source_id})})
    queued = JobQueued(job_id=plan.id, kind=plan.kind.value, calls=0)
    assert store.create_job(plan, [], submitted={"context": []}, events=[queued], seed=seed)
    copy = store.copy_source(plan.id)
    assert copy.log == seed.log and copy.exchanges == seed.exchanges  # byte for byte
    assert copy.info.exchanges == 1 and copy.info.ticks == 0
    assert store.record(plan.id).to_dict()["continued_from"] == source_id
    keys = store.keys(plan.id)
    expiry = store.redis.pexpiretime(keys.job)
    assert store.redis.pexpiretime(keys.exchanges) == expiry == store.redis.pexpiretime(keys.log)
    assert not store.create_job(plan, [], submitted={}, events=[queued], seed=seed)  # the id is taken: nothing


def test_threads_and_forks_are_listed_in_order_and_live_as_long_as_their_longest_job(backend: Backend):
    store = backend.store
    root, first, second = agent(store), agent(store), agent(store)
    store.list_copy(first, thread=root, expire_at_ms=4_000_000_000_000)
    store.list_copy(second, thread=root, expire_at_ms=3_000_000_000_000)
    assert store.thread_jobs(root) == [root, first, second]
    assert store.redis.pexpiretime(store.fleet.thread(root)) == 4_000_000_000_000
    store.list_copy(first, forked_from=root, expire_at_ms=3_000_000_000_000)
    assert store.forks_of(root) == [first] and store.forks_of(first) == []
    assert store.submitted_job(first) == AGENT and store.submitted_job("job_gone") is None


def test_a_gone_source_is_expired_while_listed_else_not_found(backend: Backend):
    store = backend.store
    job_id = agent(store)
    keys = store.keys(job_id)
    store.redis.delete(keys.job, keys.log, keys.spec)
    with pytest.raises(JobExpiredError):
        store.copy_source(job_id)
    with pytest.raises(JobNotFoundError) as never:
        store.copy_source("job_never_submitted")
    assert not isinstance(never.value, JobExpiredError)
