"""The store contract, continued: a job's cold spec (the submitted job, its solution schema, an agent job's
registered tools) lives in its own key, out of the job hash every advance, tick and commit reads, with the job's
expiry; a job written before that key existed (its spec in its job hash) is still read and finishes. Asserted
on `StateStore` on the session's private Redis and on a Redis Cluster."""

from __future__ import annotations

from agentq.protocol.digests import dumps
from agentq.protocol.records import ErrorInfo, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store import core
from agentq.store.keys import SPEC_FIELDS
from agentq.store.sync_reads import run
from tests.runtime.conftest import Backend, make_plan, records_of
from tests.runtime.test_store_contract import CHAIN, LEASE_MS, TOOLS, job_finished, message, submit
from tests.runtime.test_store_contract_steps import AGENT, agent


def stored(backend: Backend, job_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """The job hash and the spec hash as stored."""
    store = backend.store
    keys = store.keys(job_id)
    return store.redis.hgetall(keys.job), store.redis.hgetall(keys.spec)


def as_before_the_spec_key(backend: Backend, job_id: str) -> None:
    """Rewrite a job as a store without the spec key wrote it: its spec's fields in its job hash."""
    store = backend.store
    _, spec = stored(backend, job_id)
    keys = store.keys(job_id)
    store.redis.hset(keys.job, mapping=spec)
    store.redis.delete(keys.spec)


def submitted(backend: Backend, job_id: str) -> object:
    """The submitted job as an Idempotency-Key replay reads it (`core.submitted`)."""
    return run(backend.store.redis, core.submitted(backend.store.keys(job_id)))


def test_the_cold_spec_lives_in_its_own_key_with_the_jobs_expiry(backend: Backend):
    store = backend.store
    job_id = agent(store)
    plan = make_plan(AGENT, TOOLS, job_id=job_id)
    job, spec = stored(backend, job_id)
    assert not set(SPEC_FIELDS) & set(job), job
    assert spec == {"submitted": dumps(AGENT), "solution": dumps(plan.solution), "registered": dumps(plan.registered)}
    assert store.agent_inputs(job_id).registered == plan.registered
    assert submitted(backend, job_id) == AGENT
    assert submitted(backend, "job_nope") is None
    plain, _ = submit(store)
    _, plain_spec = stored(backend, plain.id)
    assert set(plain_spec) == {"submitted", "solution"}  # a plan job registers no tools
    # the spec expires with the job's other keys
    keys = store.keys(job_id)
    expiry = store.redis.pexpiretime(keys.job)
    assert expiry > 0 and store.redis.pexpiretime(keys.spec) == expiry
    assert store.redis.hget(keys.job, "expire_at_ms") == str(expiry)


def test_a_rejected_job_has_no_spec(backend: Backend):
    store = backend.store
    assert store.record_rejection("job_rejected", ErrorInfo("x", "y"), ttl_s=60)
    assert submitted(backend, "job_rejected") is None
    assert store.job_info("job_rejected").status is JobStatus.FAILED


def test_a_job_written_before_the_spec_key_is_read_and_finishes(backend: Backend):
    store = backend.store
    plan, ids = submit(store)
    as_before_the_spec_key(backend, plan.id)
    job, spec = stored(backend, plan.id)
    assert set(SPEC_FIELDS) - {"registered"} <= set(job) and not spec
    assert submitted(backend, plan.id) == CHAIN
    assert store.job_info(plan.id).status is JobStatus.QUEUED
    for tool, value in (("bg", None), ("first", 2), ("second", 3)):
        store.claim(plan.id, ids[tool], token=tool, lease_ms=LEASE_MS)
        messages = [] if value is None else [message(ids[tool], value)]
        last = store.commit(plan.id, ids[tool], token=tool, status=CallStatus.DONE, messages=messages)
    assert last.finish_inputs is not None and last.finish_inputs == store.finish_inputs(plan.id)
    info = last.finish_inputs.info
    assert (info.id, info.open_calls, info.options) == (plan.id, 0, plan.options)
    record = JobRecord(id=plan.id, status=JobStatus.SUCCEEDED, state={"x": 1, "a": 3})
    assert store.finalize(plan.id, record=record, event=job_finished(plan.id, JobStatus.SUCCEEDED))
    assert store.record(plan.id) == record and store.job_status(plan.id) is JobStatus.SUCCEEDED


def test_an_agent_job_written_before_the_spec_key_reads_its_registered_tools(backend: Backend):
    store = backend.store
    job_id = agent(store)
    registered = store.agent_inputs(job_id).registered
    assert registered
    as_before_the_spec_key(backend, job_id)
    assert "registered" in stored(backend, job_id)[0]
    inputs = store.agent_inputs(job_id)
    assert (inputs.registered, inputs.info.id) == (registered, job_id)
    assert submitted(backend, job_id) == AGENT


def test_tools_composed_after_a_submission_without_tools_expire_with_the_job(backend: Backend):
    store = backend.store
    plan = make_plan(AGENT, {}, job_id="job_toolless")
    assert store.create_job(plan, records_of(plan), submitted=AGENT, events=[])
    assert store.job_tools(plan.id) == {}
    store.set_job_tools(plan.id, {"first": {"v": 1}})
    store.set_job_tools(plan.id, {"second": {"v": 2}})
    assert store.job_tools(plan.id) == {"first": {"v": 1}, "second": {"v": 2}}
    keys = store.keys(plan.id)
    expiry = store.redis.pexpiretime(keys.job)
    assert expiry > 0 and store.redis.pexpiretime(keys.tools) == expiry
