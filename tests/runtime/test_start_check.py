"""The `@unstarted` timer of a job whose first tasks only its submitter sends (`JobTimers.start_check`,
`start_unstarted`): written in the job's own round trip, it sends a job's first tasks again when the submitter died
between the write and `_start`, and leaves a started job alone. `JobService` on a `StateStore` (the session's
private Redis) with a recording dispatcher; the same with real workers and a real dispatcher's timer loop is in
tests/integration/test_unstarted_jobs.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.job_timers import UNSTARTED, job_timer_member
from agentq.store.state import StateStore
from tests.redis_trips import RoundTrips
from tests.runtime.conftest import Rig, make_plan, records_of, tool_schema

pytestmark = pytest.mark.timeout(10)

SLEEP_FIRST = {"tools": ["sleep", "first"], "calls": [{"_tool": "sleep", "seconds": 0, "_outputPath": "†state.s"},
                                                      {"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}
AGENT = {"context": [{"type": "text", "text": "do it"}]}


@pytest.fixture
def rig(redis_store: StateStore) -> Iterator[Rig]:
    rig = Rig(redis_store)
    rig.activity("first", lambda call: call["x"] + 1, {"x": {"type": "number"}})
    yield rig
    rig.executor.leases.stop()


def killed_after_the_write(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The submitter dies after writing a job and before sending anything of it."""
    def dies(*args: object) -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(rig.service, "_start", dies)


def timer_due(rig: Rig, job_id: str) -> float | None:
    return rig.store.redis.zscore(rig.store.fleet.timers, job_timer_member(job_id, UNSTARTED))


def test_a_job_whose_submitter_died_before_starting_it_is_started_by_its_timer(rig: Rig,
                                                                               monkeypatch: pytest.MonkeyPatch):
    killed_after_the_write(rig, monkeypatch)
    before = time.time()
    with pytest.raises(SystemExit):
        rig.service.submit(SLEEP_FIRST, job_id="job_sleep_first")
    with pytest.raises(SystemExit):
        rig.service.submit(AGENT, job_id="job_agent_first")
    assert rig.dispatcher.sent == [] and rig.dispatcher.ticks == []  # nothing of either was sent
    for job_id in ("job_sleep_first", "job_agent_first"):
        assert rig.store.job_info(job_id).status is JobStatus.QUEUED
        due = timer_due(rig, job_id)
        assert due is not None and before + rig.service.settings.lease_s - 0.001 <= due / 1000 <= time.time() + 30

    assert rig.service.fire_job_timer("job_sleep_first", UNSTARTED)
    assert sorted((job, r.tool) for job, r in rig.dispatcher.sent) == [("job_sleep_first", "first"),
                                                                       ("job_sleep_first", "sleep")]
    assert rig.service.fire_job_timer("job_agent_first", UNSTARTED)
    assert rig.dispatcher.ticks == ["job_agent_first"]

    rig.drain()  # the sleep's call and the activity call run: the job is started
    assert rig.store.job_info("job_sleep_first").status is not JobStatus.QUEUED
    sent = len(rig.dispatcher.sent)
    assert not rig.service.start_unstarted("job_sleep_first")  # started: left alone
    assert len(rig.dispatcher.sent) == sent
    assert not rig.service.start_unstarted("job_gone")  # expired or never written: nothing to do


def test_a_started_job_is_left_alone_by_its_timer(rig: Rig):
    job_id = rig.service.submit(SLEEP_FIRST)
    assert timer_due(rig, job_id) is not None  # `_start` alone sends its sleep's task
    rig.drain()
    assert rig.store.call_statuses(job_id)[rig.dispatcher.sent[1][1].id] is CallStatus.DONE
    sent = len(rig.dispatcher.sent)
    assert rig.service.fire_job_timer(job_id, UNSTARTED)  # done with: the timer loop drops it
    assert len(rig.dispatcher.sent) == sent


def test_the_timer_costs_no_round_trip_of_its_own(redis_store: StateStore):
    """It goes in the pipeline of the job's write, first: a job written always has its timer."""
    tools = {"first": tool_schema("first", {"x": {"type": "number"}})}
    job = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}
    first = make_plan(job, tools, job_id="job_warm")
    assert redis_store.create_job(first, records_of(first), submitted=job, events=[])  # the script is loaded
    plan = make_plan(job, tools, job_id="job_checked")
    trips = RoundTrips(redis_store.redis)
    assert redis_store.create_job(plan, records_of(plan), submitted=job, events=[], start_check_ms=123_000)
    # the script lists the job itself; the listings were trimmed with job_warm's
    assert trips.take() == [["ZADD", "EVALSHA"]]
    assert redis_store.redis.zscore(redis_store.fleet.timers, job_timer_member(plan.id, UNSTARTED)) == 123_000
    # a job without it writes none (the common activity job whose admission step is written with it)
    other = make_plan(job, tools, job_id="job_unchecked")
    trips.take()
    assert redis_store.create_job(other, records_of(other), submitted=job, events=[])
    assert trips.take() == [["EVALSHA"]]
    # a refused id leaves its job's timer as it was
    assert not redis_store.create_job(plan, records_of(plan), submitted=job, events=[], start_check_ms=999_000)
    assert redis_store.redis.zscore(redis_store.fleet.timers, job_timer_member(plan.id, UNSTARTED)) == 123_000


def test_a_job_with_concurrency_keys_whose_submitter_died_is_admitted_by_its_timer(rig: Rig,
                                                                                  monkeypatch: pytest.MonkeyPatch):
    keyed = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}],
             "options": {"concurrency": [{"key": "acct-42", "limit": 1}]}}
    killed_after_the_write(rig, monkeypatch)
    with pytest.raises(SystemExit):
        rig.service.submit(keyed, job_id="job_keyed_unstarted")
    assert rig.store.job_info("job_keyed_unstarted").status is JobStatus.WAITING  # and never asked for its keys
    assert rig.service.start_unstarted("job_keyed_unstarted")
    assert rig.store.job_info("job_keyed_unstarted").status is JobStatus.QUEUED  # it holds its key now
    assert [(job, r.tool) for job, r in rig.dispatcher.sent] == [("job_keyed_unstarted", "first")]
    assert rig.service.start_unstarted("job_keyed_unstarted")  # again (still queued): sent again, harmless
    rig.drain()
    assert rig.store.record("job_keyed_unstarted").status is JobStatus.SUCCEEDED
