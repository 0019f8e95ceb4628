"""Job concurrency keys (docs/tenants.md), the same contract on Redis and a Redis Cluster: at most
`limit` jobs of a tenant hold a key at once, first come first served per key, a job holds all its keys or waits;
a job that ends, is canceled, expires, or whose end's release was lost gives its place to the next in line."""

from __future__ import annotations

import time

from agentq.protocol.envelopes import JobFinished, JobQueued
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from tests.runtime.conftest import Backend, make_plan, records_of

AN_HOUR_MS = 3_600_000


def expiry_ms(backend: Backend, in_ms: int = AN_HOUR_MS) -> int:
    return int(time.time() * 1000) + in_ms


def write(backend: Backend, job_id: str, *keys: tuple[str, int], tenant: str = "acme") -> tuple[tuple[str, int], ...]:
    """Write a job with `keys` (it is `waiting`) and return its keys."""
    options = {"concurrency": [{"key": key, "limit": limit} for key, limit in keys]}
    plan = make_plan({"calls": [], "options": options}, {}, job_id=job_id)
    assert backend.store.create_job(plan, records_of(plan), submitted={}, events=[], tenant=tenant)
    assert backend.store.job_status(job_id) is JobStatus.WAITING
    return tuple(keys)


def admit(backend: Backend, job_id: str, *keys: tuple[str, int], tenant: str = "acme", start: bool = True) -> list[str]:
    """Write and admit a job: the jobs let in, started (as the job service does) unless `start` is False."""
    write(backend, job_id, *keys, tenant=tenant)
    return started(backend, backend.store.admit_concurrency(tenant, job_id, keys, expire_at_ms=expiry_ms(backend)),
                   start)


def started(backend: Backend, job_ids: list[str], start: bool = True) -> list[str]:
    for job_id in job_ids if start else ():
        assert backend.store.start_waiting(job_id, event=queued(job_id))
        assert backend.store.job_status(job_id) is JobStatus.QUEUED
    return job_ids


def end(backend: Backend, job_id: str, tenant: str = "acme") -> list[str]:
    """Finalize a job as failed and release its keys: the jobs let in."""
    record = JobRecord(id=job_id, status=JobStatus.FAILED, tenant=tenant)
    assert backend.store.finalize(job_id, record=record, event=JobFinished(job_id=job_id, status="failed"))
    return started(backend, backend.store.release_concurrency(tenant, job_id))


def queued(job_id: str) -> JobQueued:
    return JobQueued(job_id=job_id, kind="plan", calls=0)


def test_a_key_lets_limit_jobs_in_and_the_rest_in_order(backend: Backend):
    two = ("acct-42", 2)
    assert admit(backend, "job_a", two) == ["job_a"]
    assert admit(backend, "job_b", two) == ["job_b"]
    assert admit(backend, "job_c", two) == []  # waits
    assert admit(backend, "job_d", two) == []
    assert admit(backend, "job_e", ("acct-42", 5)) == []  # room under its own limit, but behind job_c and job_d
    assert admit(backend, "job_x", two, tenant="globex") == ["job_x"]  # another tenant's key of the same name
    assert end(backend, "job_a") == ["job_c"]
    assert not backend.store.start_waiting("job_c", event=queued("job_c"))  # once
    assert end(backend, "job_b") == ["job_d", "job_e"]  # job_e fits its own limit of 5 once first in line


def test_a_job_holds_all_its_keys_or_waits(backend: Backend):
    assert admit(backend, "job_a", ("k1", 1)) == ["job_a"]
    assert admit(backend, "job_b", ("k2", 1), ("k1", 1)) == []  # k2 is free, k1 is not: it holds neither
    assert admit(backend, "job_c", ("k2", 1)) == []  # behind job_b on k2
    assert end(backend, "job_a") == ["job_b"]
    assert end(backend, "job_b") == ["job_c"]


def test_a_canceled_waiting_job_leaves_the_line_and_is_never_let_in(backend: Backend):
    one = ("k", 1)
    assert admit(backend, "job_a", one) == ["job_a"]
    assert admit(backend, "job_b", one) == []
    assert admit(backend, "job_c", one) == []
    status, _ = backend.store.cancel("job_b", event=JobFinished(job_id="job_b", status="canceled"))
    assert status is JobStatus.CANCELED
    assert backend.store.release_concurrency("acme", "job_b") == []
    assert not backend.store.start_waiting("job_b", event=queued("job_b"))  # a canceled job never starts
    assert end(backend, "job_a") == ["job_c"]


def test_an_ended_holder_whose_release_was_lost_blocks_no_one(backend: Backend):
    """The step that ends a job and the one that releases its keys are two (different slots of a cluster): a
    process dying between them leaves an ended job holding a key, until a job that would wait looks."""
    one = ("k", 1)
    assert admit(backend, "job_a", one) == ["job_a"]
    record = JobRecord(id="job_a", status=JobStatus.SUCCEEDED, tenant="acme")
    assert backend.store.finalize("job_a", record=record, event=JobFinished(job_id="job_a", status="succeeded"))
    assert admit(backend, "job_b", one) == ["job_b"]  # job_a ended: released before job_b waits, job_b let in
    assert admit(backend, "job_c", one) == []


def test_a_job_let_in_but_never_started_is_handed_back(backend: Backend):
    """Its starter died between the step that let it in and its start: the next job that would wait hands it back
    to be started, rather than let it hold the key while `waiting` for ever."""
    one = ("k", 1)
    assert admit(backend, "job_a", one, start=False) == ["job_a"]  # let in, never started
    assert admit(backend, "job_b", one) == ["job_a"]  # job_b waits; job_a is handed back, and started
    assert admit(backend, "job_c", one) == []


def test_a_holder_that_expired_gives_its_place(backend: Backend):
    one = ("k", 1)
    write(backend, "job_a", one)
    assert started(backend, backend.store.admit_concurrency("acme", "job_a", (one,),
                                                           expire_at_ms=expiry_ms(backend, 200))) == ["job_a"]
    assert admit(backend, "job_b", one) == []
    backend.advance(0.4)  # job_a expired without ending
    assert admit(backend, "job_c", one) == ["job_b"]  # the first in line goes first; job_c waits behind it


def test_admitting_again_answers_as_it_stands(backend: Backend):
    one = ("k", 1)
    assert admit(backend, "job_a", one) == ["job_a"]
    assert backend.store.admit_concurrency("acme", "job_a", (one,), expire_at_ms=expiry_ms(backend)) == ["job_a"]
    assert admit(backend, "job_b", one) == []
    assert backend.store.admit_concurrency("acme", "job_b", (one,), expire_at_ms=expiry_ms(backend)) == []


def test_a_sweep_starts_what_a_lost_release_or_start_left_waiting(backend: Backend):
    """No job that would wait comes to look: the dispatchers' sweep does. A holder that ended without its release,
    one let in and never started, one that expired: each line moves on."""
    store, one = backend.store, ("k", 1)
    assert store.sweep_concurrency() == {}
    assert admit(backend, "job_a", one) == ["job_a"]
    assert admit(backend, "job_b", one) == []
    assert admit(backend, "job_x", ("k2", 1), tenant="globex") == ["job_x"]
    assert store.sweep_concurrency() == {}  # nothing ended: nothing moves
    record = JobRecord(id="job_a", status=JobStatus.SUCCEEDED, tenant="acme")
    assert store.finalize("job_a", record=record, event=JobFinished(job_id="job_a", status="succeeded"))
    assert store.sweep_concurrency() == {"acme": ["job_b"]}  # job_a's release was lost; job_b let in
    assert store.sweep_concurrency() == {"acme": ["job_b"]}  # let in, never started: handed back again
    started(backend, ["job_b"])
    assert store.sweep_concurrency() == {}

    write(backend, "job_c", ("k3", 1))
    assert started(backend, store.admit_concurrency("acme", "job_c", (("k3", 1),),
                                                    expire_at_ms=expiry_ms(backend, 200))) == ["job_c"]
    assert admit(backend, "job_d", ("k3", 1)) == []
    backend.advance(0.4)  # job_c expired holding k3
    assert store.sweep_concurrency() == {"acme": ["job_d"]}
