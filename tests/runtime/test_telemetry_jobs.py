"""A job's trace whoever submits it (`agentq/telemetry/jobs.py`): a `traceparent` is kept without OpenTelemetry, and
a job nobody traced yet gets its root context once, from the first process that traces it, on the session's Redis
(the Redis step itself is in tests/runtime/test_store_contract.py; the processes in
tests/e2e/test_tracing_untraced_submitter.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from types import SimpleNamespace

import pytest

from agentq import telemetry
from agentq.errors import StoreUnavailableError
from agentq.protocol.envelopes import JobQueued
from agentq.protocol.records import JobInfo, JobKind, ParentLink
from agentq.protocol.status import JobStatus
from agentq.store.state import StateStore
from agentq.telemetry import jobs as job_traces
from tests.runtime.conftest import Rig, make_plan, records_of, tool_schema
from tests.runtime.test_telemetry import spans  # noqa: F401  (the fixture)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
GIVEN = f"00-{TRACE}-00f067aa0ba902b7-01"
OTHER = f"00-{'5' * 32}-{'6' * 16}-01"
TOOLS = {"bg": tool_schema("bg")}


def submit(store: StateStore, job_id: str, *, parent: ParentLink | None = None, traceparent: str | None = None):
    plan = make_plan({"calls": [{"_tool": "bg"}]}, TOOLS, job_id=job_id)
    assert store.create_job(plan, records_of(plan), submitted={}, parent=parent.to_dict() if parent else None,
                            events=[JobQueued(job_id=job_id, kind="plan", calls=1)], traceparent=traceparent)


@pytest.fixture
def store(redis_store: StateStore) -> Iterator[StateStore]:
    bound = redis_store
    job_traces.bind(bound)
    try:
        yield bound
    finally:
        job_traces.bind(None)


@pytest.mark.parametrize(("given", "kept"), [
    (GIVEN, GIVEN),
    (f" {GIVEN.upper()} ", GIVEN),  # as headers come: case and spaces do not matter
    (f"01-{TRACE}-00f067aa0ba902b7-01-later-fields", f"00-{TRACE}-00f067aa0ba902b7-01"),  # a later version
    (f"{GIVEN}-more", None),  # version 00 has exactly four fields
    (f"ff-{TRACE}-00f067aa0ba902b7-01", None),
    (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),
    (f"00-{TRACE}-{'0' * 16}-01", None),
    ("00-not-a-trace-01", None),
    ("", None),
])
def test_a_traceparent_is_checked_without_opentelemetry(given: str, kept: str | None):
    assert telemetry.well_formed(given) == kept


def test_a_service_that_does_not_trace_stores_the_traceparent_it_is_given(redis_store: StateStore):
    assert not telemetry.enabled()
    rig = Rig(redis_store)
    rig.activity("bg", lambda call: None)
    job = {"calls": [{"_tool": "bg"}]}
    try:
        rig.service.submit(job, job_id="job_client", traceparent=GIVEN)  # Client.submit, the API's header
        rig.service.submit_by_task(job, job_id="job_task", traceparent=GIVEN.upper())  # a task's header
        rig.service.submit(job, job_id="job_bad", traceparent="00-not-a-trace-01")
        rig.service.submit(job, job_id="job_none")
    finally:
        rig.executor.leases.stop()
    stored = {job_id: redis_store.job_info(job_id).traceparent
              for job_id in ("job_client", "job_task", "job_bad", "job_none")}
    assert stored == {"job_client": GIVEN, "job_task": GIVEN, "job_bad": None, "job_none": None}


def test_a_job_nobody_traced_gets_one_root_span_once_and_its_ticks_continue_it(store: StateStore, spans):  # noqa: F811
    submit(store, "job_root")
    first = job_traces.job_traceparent("job_root")
    assert first is not None and store.job_info("job_root").traceparent == first
    assert job_traces.job_traceparent("job_root") == first  # stored: read, not made again
    (root,) = spans.get_finished_spans()
    assert root.name == "job" and root.parent is None and root.attributes["agentq.job.id"] == "job_root"
    created = datetime.fromisoformat(store.job_info("job_root").created_at or "")
    assert root.start_time == int(created.timestamp() * 1e9)  # the job's life from its creation
    assert first.startswith(f"00-{root.context.trace_id:032x}-{root.context.span_id:016x}-")

    submit(store, "job_ticked")
    with telemetry.tick_span(store.job_info("job_ticked"), 0), telemetry.tick_span(
            store.job_info("job_ticked"), 1):
        pass
    ticked = [s for s in spans.get_finished_spans() if s.attributes["agentq.job.id"] == "job_ticked"]
    (made,) = [s for s in ticked if s.name == "job"]
    assert len(ticked) == 3 and {s.context.trace_id for s in ticked} == {made.context.trace_id}
    assert all(s.parent.span_id == made.context.span_id for s in ticked if s.name == "invoke_agent")


def test_of_two_processes_creating_a_jobs_context_at_once_one_wins(store: StateStore, spans):  # noqa: F811
    submit(store, "job_race")
    stale = store.job_info("job_race")  # read before the other process stored its context
    assert store.adopt_traceparent("job_race", OTHER) == OTHER  # the other process wins
    assert job_traces.job_traceparent("job_race", stale) == OTHER
    assert spans.get_finished_spans() == ()  # the loser's span is never ended, so never exported
    with telemetry.call_span(SimpleNamespace(), "job_race", "call_1", None):  # a task sent untraced
        pass
    (call,) = spans.get_finished_spans()
    assert call.parent.span_id == 0x6666666666666666 and call.context.trace_id == int("5" * 32, 16)


def test_a_module_child_job_nobody_traced_joins_its_parents_trace(store: StateStore, spans):  # noqa: F811
    submit(store, "job_parent")
    submit(store, "job_child", parent=ParentLink(job="job_parent", call="call_1", token="t"))
    child = job_traces.job_traceparent("job_child")
    parent = store.job_info("job_parent").traceparent
    assert child is not None and parent is not None and child != parent
    by_job = {s.attributes["agentq.job.id"]: s for s in spans.get_finished_spans()}
    assert by_job["job_child"].parent.span_id == by_job["job_parent"].context.span_id
    assert child.split("-")[1] == parent.split("-")[1]

    submit(store, "job_given", traceparent=GIVEN)  # a submitter's traceparent is the job's context as it is
    submit(store, "job_given_child", parent=ParentLink(job="job_given", call="call_1", token="t"))
    assert job_traces.job_traceparent("job_given") == GIVEN
    assert (job_traces.job_traceparent("job_given_child") or "").split("-")[1] == TRACE

    submit(store, "job_orphan", parent=ParentLink(job="job_expired", call="call_1", token="t"))
    assert job_traces.job_traceparent("job_orphan") is not None  # a parent that is gone: a root of its own
    (orphan,) = [s for s in spans.get_finished_spans() if s.attributes["agentq.job.id"] == "job_orphan"]
    assert orphan.parent is None


def test_nothing_is_created_for_a_job_that_is_gone_unbound_or_untraced(store: StateStore, spans):  # noqa: F811
    assert job_traces.job_traceparent("job_gone") is None
    gone = JobInfo(id="job_gone", kind=JobKind.PLAN, status=JobStatus.QUEUED)
    assert job_traces.job_traceparent("job_gone", gone) is None  # expired between the read and the step
    assert spans.get_finished_spans() == ()
    assert store.adopt_traceparent("job_gone", OTHER) is None

    class Down:
        def job_info(self, job_id: str) -> JobInfo:
            raise StoreUnavailableError("the state store is unreachable")

        def adopt_traceparent(self, job_id: str, traceparent: str) -> str | None:
            raise AssertionError("not reached")

    job_traces.bind(Down())
    assert job_traces.job_traceparent("job_1") is None  # a trace is never worth failing a job for
    submit(store, "job_unbound")
    job_traces.bind(None)
    assert job_traces.job_traceparent("job_unbound") is None
    job_traces.bind(store)
    telemetry.uninstall()
    assert job_traces.job_traceparent("job_unbound") is None
    assert store.job_info("job_unbound").traceparent is None
