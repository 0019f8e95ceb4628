"""Submissions reuse what the fleet published and announced for one heartbeat, on a `StateStore` (the
session's private Redis).

Each submission used to read the published tools and the known activities (five round trips on Redis). Now
a `JobService` reads them once per `AGENTQ_HEARTBEAT_S` and trusts that view only for what it can tell for
sure: a job it would reject, or route to the model, is planned again against a fresh read, so what was
announced since is seen at once; a change to something already known is seen within one heartbeat.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from agentq.engine.routing import Routing
from agentq.errors import JobValidationError
from agentq.protocol.records import CallMode, WorkerAnnouncement
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.service import JobService
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from agentq.store.tenants import RedisTenants
from tests.runtime.clock import ManualClock
from tests.runtime.conftest import Recorder, tool_schema

pytestmark = pytest.mark.timeout(10)

HEARTBEAT_S = 10.0
PAY = {"name": "pay", "task": "agentq.activity.pay", "queue": "payments"}
SHIP = {"name": "ship", "task": "agentq.activity.ship", "queue": "shipping"}
PAY_JOB = {"calls": [{"_tool": "pay", "amount": 5, "_outputPath": "†state.payment"}]}
SHIP_JOB = {"calls": [{"_tool": "ship", "to": "Lyon", "_outputPath": "†state.shipment"}]}


class CountingFleet(RedisFleet):
    """Counts the reads a submission makes of what the fleet published and announced."""

    def __init__(self, store: StateStore):
        super().__init__(store)
        self.reads: Counter[str] = Counter()

    def published_tools(self) -> dict[str, dict]:
        self.reads["published_tools"] += 1
        return super().published_tools()

    def known_activities(self, memory_s: float) -> dict[str, dict]:
        self.reads["known_activities"] += 1
        return super().known_activities(memory_s)


@pytest.fixture
def store(redis_url: str, clock: ManualClock) -> Iterator[StateStore]:
    store = StateStore(redis_url, clock=clock)
    yield store
    store.close()


@pytest.fixture
def fleet(store: StateStore) -> CountingFleet:
    fleet = CountingFleet(store)
    fleet.publish_tools({"pay": tool_schema("pay", {"amount": {"type": "number"}}),
                         "ship": tool_schema("ship", {"to": {"type": "string"}})}, publisher="w1")
    fleet.announce_worker("w1", WorkerAnnouncement("w1", activities=(PAY,)), ttl_s=3600)
    return fleet


@pytest.fixture
def service(store: StateStore, fleet: CountingFleet, clock: ManualClock) -> Iterator[JobService]:
    settings = Settings(heartbeat_s=HEARTBEAT_S)
    yield JobService(store, Recorder(), settings=settings, routing=Routing.from_settings(settings),
                     tools=ToolRegistry(), clock=clock, fleet=fleet, tenants=RedisTenants(store))


def the_call(store: StateStore, job_id: str):
    (record,) = store.call_records(job_id).values()
    return record


def test_submissions_within_a_heartbeat_read_the_fleet_once(service: JobService, fleet: CountingFleet,
                                                            store: StateStore, clock: ManualClock):
    for _ in range(5):
        record = the_call(store, service.submit(PAY_JOB))
        assert (record.mode, record.queue) == (CallMode.EXPLICIT, "payments")
        clock.advance(HEARTBEAT_S / 10)
    assert fleet.reads == {"published_tools": 1, "known_activities": 1}

    clock.advance(HEARTBEAT_S / 2)  # a heartbeat after the first read
    service.submit(PAY_JOB)
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}


def test_what_a_client_asks_for_is_always_read_now(service: JobService, fleet: CountingFleet):
    service.submit(PAY_JOB)
    assert "pay" in service.known_activities() and "pay" in service.available_tools()
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}


def test_an_activity_announced_since_the_last_read_is_explicit_at_once(service: JobService, fleet: CountingFleet,
                                                                       store: StateStore):
    service.submit(PAY_JOB)  # the view: `ship` published, but no worker of it ever announced
    fleet.announce_worker("w2", WorkerAnnouncement("w2", activities=(SHIP,)), ttl_s=3600)

    record = the_call(store, service.submit(SHIP_JOB))
    # the cached view would hand the call to the model: planned again against a fresh read instead
    assert (record.mode, record.activity, record.queue) == (CallMode.EXPLICIT, "ship", "shipping")
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}
    service.submit(SHIP_JOB)  # and the fresh view serves the next ones
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}


def test_a_tool_published_since_the_last_read_is_accepted_at_once(service: JobService, fleet: CountingFleet,
                                                                  store: StateStore):
    service.submit(PAY_JOB)
    fleet.publish_tools({"refund": tool_schema("refund", {"amount": {"type": "number"}})}, publisher="w3")
    refund = {"name": "refund", "queue": "payments"}
    fleet.announce_worker("w3", WorkerAnnouncement("w3", activities=(refund,)), ttl_s=60)

    job = {"calls": [{"_tool": "refund", "amount": 2, "_outputPath": "†state.refund"}]}
    record = the_call(store, service.submit(job))
    assert (record.mode, record.tool, record.queue) == (CallMode.EXPLICIT, "refund", "payments")


def test_a_rejection_is_never_made_on_a_cached_view(service: JobService, fleet: CountingFleet):
    service.submit(PAY_JOB)
    with pytest.raises(JobValidationError) as rejected:
        service.submit({"calls": [{"_tool": "nope", "_outputPath": "†state.x"}]})
    assert rejected.value.problems[0].pointer == "/calls/0/_tool"
    assert "nope" in rejected.value.problems[0].message
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}  # read again before rejecting


def test_a_change_to_a_known_activity_is_seen_within_one_heartbeat(service: JobService, fleet: CountingFleet,
                                                                   store: StateStore, clock: ManualClock):
    assert the_call(store, service.submit(PAY_JOB)).queue == "payments"
    fleet.announce_worker("w1", WorkerAnnouncement("w1", activities=({**PAY, "queue": "payments-v2"},)), ttl_s=3600)

    clock.advance(HEARTBEAT_S * 0.9)
    assert the_call(store, service.submit(PAY_JOB)).queue == "payments"  # the view read 0.9 heartbeat ago
    clock.advance(HEARTBEAT_S * 0.1)
    assert the_call(store, service.submit(PAY_JOB)).queue == "payments-v2"


def test_a_clock_going_backwards_reads_again(service: JobService, fleet: CountingFleet, clock: ManualClock):
    service.submit(PAY_JOB)
    clock.advance(-1)
    service.submit(PAY_JOB)
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}


def test_forgetting_an_activity_through_the_service_is_seen_by_its_next_submission(service: JobService,
                                                                                   fleet: CountingFleet,
                                                                                   store: StateStore):
    fleet.retire_worker("w1")  # known, no live worker: its calls wait on its queue
    assert the_call(store, service.submit(PAY_JOB)).mode is CallMode.EXPLICIT
    assert service.forget_activity("pay") and not service.forget_activity("pay")
    assert the_call(store, service.submit(PAY_JOB)).mode is CallMode.LATENT


def test_agent_jobs_within_a_heartbeat_read_the_fleet_once_while_it_knows_their_tools(service: JobService,
                                                                                      fleet: CountingFleet):
    """An agent job's plan stands on the cached view when it knows an activity of every tool the job names (its
    ticks compose its tools again); a tool it knows none of may have a worker announced since: read again."""
    agent_job = {"context": [{"type": "text", "text": "Pay the invoice"}], "tools": ["pay"]}
    no_tools = {"context": [{"type": "text", "text": "Say hello"}], "tools": []}
    for job in (agent_job, no_tools, agent_job, no_tools):
        service.submit(job)
    assert fleet.reads == {"published_tools": 1, "known_activities": 1}

    fleet.announce_worker("w2", WorkerAnnouncement("w2", activities=(SHIP,)), ttl_s=3600)
    shipping = {"context": [{"type": "text", "text": "Ship it"}], "tools": ["pay", "ship"]}
    service.submit(shipping)
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}  # `ship` was not in the view: read now
    service.submit(shipping)  # and the fresh view serves the next ones
    assert fleet.reads == {"published_tools": 2, "known_activities": 2}
