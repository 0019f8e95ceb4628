"""A new job's admission step made with its write (docs/tenants.md): on a single Redis it runs in the write's round
trip, after the job's script and only if that wrote the job; elsewhere (a cluster) it is made on its own once the job is
written. A write that fails after the step ran gives the job's places back, never publishing its calls."""

from __future__ import annotations

import json

from agentq.protocol.admission import AdmissionConfig, AdmissionRequest, Ticket
from agentq.protocol.records import CallMode, CallRecord
from agentq.runtime.admission import Admission
from agentq.settings import Settings
from agentq.store.admission import queue_admission, took_admission
from agentq.store.fleet import RedisFleet
from tests.runtime.conftest import Backend, make_plan, records_of, tool_schema

Q = "agentq.activity.work"


def admission(backend: Backend) -> tuple[Admission, list[str]]:
    adm = Admission(backend.store, Settings(admission_window=2), fleet=RedisFleet(backend.store))
    published: list[str] = []
    adm.publisher = lambda calls: published.extend(f"{job_id}/{r.id}" for job_id, r in calls)
    return adm, published


def plan_of(n: int):
    job = {"calls": [{"_tool": "work", "_outputPath": f"†state.r{i}"} for i in range(n)]}
    plan = make_plan(job, {"work": tool_schema("work")})
    return plan, records_of(plan)


def test_a_job_written_with_its_admission_step_publishes_what_the_step_admitted(backend: Backend):
    adm, _ = admission(backend)
    first, _ = plan_of(0)  # the scripts loaded (a Redis without them: the step is made on its own)
    assert backend.store.create_job(first, [], submitted={}, events=[])
    assert backend.store.admit_calls([], adm.config()) == []
    plan, records = plan_of(3)
    with_write = adm.with_write(plan, records, "a", fresh=True)
    assert with_write is not None and len(with_write.request.tickets) == 3
    assert backend.store.create_job(plan, records, submitted={}, events=[], tenant="a", admission=with_write.request)
    # a single Redis ran the step with the write; a cluster leaves it to its own step
    assert with_write.request.reply == (["#1", "#2"] if backend.name == "redis" else None)
    # the dispatch of the job's ready calls publishes what the step admitted (a step of their own when it did not
    # run), once: a later dispatch of them is a step of its own, which finds them admitted
    assert [r.id for _, r in adm.admit(plan.id, records)] == [r.id for r in records[:2]]
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}
    assert [r.id for _, r in adm.admit(plan.id, records)] == [r.id for r in records[:2]]  # sent again
    assert backend.store.admission_counts() == {f"q:{Q}": 2, "t:a": 2} and backend.store.parked_queues() == [Q]


def test_no_step_is_made_with_the_write_of_a_job_whose_id_was_given(backend: Backend):
    adm, _ = admission(backend)
    plan, records = plan_of(1)
    assert adm.with_write(plan, records, "a", fresh=False) is None


def test_the_step_does_nothing_when_the_job_was_not_written(redis_url: str):
    from agentq.store.state import StateStore

    store = StateStore(redis_url)
    try:
        config = AdmissionConfig(windows={Q: 2})
        store.admit_calls([], config)  # the step's script loaded
        request = AdmissionRequest([Ticket(member="job_x/c1", queue=Q, tenant="a")], config)
        pipe = store.redis.pipeline(transaction=False)
        assert queue_admission(store.admission, pipe, request, store.keys("job_x").job)
        assert took_admission(request, pipe.execute(raise_on_error=False), True) == []
        assert request.reply is None and store.admission_counts() == {} and store.admitted_before(2**53) == []
    finally:
        store.close()


def test_a_write_that_failed_after_its_step_gives_the_job_s_places_back_unpublished(backend: Backend):
    adm, published = admission(backend)
    others = [Ticket(member=f"job_o/c{n}", queue=Q, tenant="b", payload=_payload("job_o", f"c{n}")) for n in range(3)]
    assert backend.store.admit_calls(others, adm.config()) == ["#1", "#2"]  # job_o/c2 parked
    plan, records = plan_of(2)
    with_write = adm.with_write(plan, records, "a", fresh=True)
    assert with_write is not None
    # the step ran with the write (job_o's first calls ended meanwhile): the job's calls parked behind job_o's,
    # then the two free places went to the job's first call ("a" before "b" at the same pass) and job_o/c2
    reply = backend.store.admit_calls(with_write.request.tickets, adm.config(), ended=["job_o/c0", "job_o/c1"])
    assert reply == [with_write.request.tickets[0].payload, _payload("job_o", "c2")]
    with_write.request.reply = reply
    with_write.withdraw()  # the write failed
    assert published == ["job_o/c2"]  # never the job's own calls
    # its first call's place went to its second call, whose place was given back in turn
    assert backend.store.admission_counts() == {f"q:{Q}": 1, "t:b": 1} and backend.store.parked_queues() == []


def _payload(job_id: str, call_id: str) -> str:
    record = CallRecord(id=call_id, index=0, call={}, tool="work", activity="work", mode=CallMode.EXPLICIT,
                        awaited=True, task="agentq.activity.work", queue=Q)
    return json.dumps([job_id, record.to_task()], separators=(",", ":"))
