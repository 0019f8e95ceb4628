"""The store's sans-I/O core (`store/core.py`): the `Follow` state machine and the steps' batches, driven by
hand (the Redis shells drive them in tests/integration/test_async_client.py and test_hot_path.py)."""

from __future__ import annotations

import pytest

from agentq.errors import JobNotFoundError, JobTimeoutError
from agentq.protocol.status import JobStatus
from agentq.store import core
from agentq.store.core import CheckStatus, Follow, Read, Wait
from agentq.store.keys import JobKeys

KEYS = JobKeys("agentq", "job1")


def entries(*names: str, start: int = 1) -> list[tuple[str, dict]]:
    return [(f"{start + n}-0", {"event": name}) for n, name in enumerate(names)]


def test_follow_reads_until_the_final_event_and_hands_on_nothing_after_it():
    machine = Follow(batch=3)
    assert machine.need() == Read("0-0", 3)
    assert machine.entries(entries("job.queued", "job.started", "call.started")) == entries(
        "job.queued", "job.started", "call.started")
    assert machine.need() == Read("3-0", 3)  # a full batch: more may be stored
    assert machine.entries(entries("call.finished", start=4)) == entries("call.finished", start=4)
    assert machine.need() == Wait("4-0", 3)
    assert machine.entries([]) == []
    assert machine.need() == CheckStatus()
    machine.status(JobStatus.RUNNING)
    assert machine.need() == Wait("4-0", 3)
    assert machine.entries(entries("job.finished", "late", start=5)) == entries("job.finished", start=5)
    assert machine.need() is None and machine.after == "5-0"


def test_follow_ends_on_an_ended_job_whose_final_event_came_before_the_position():
    machine = Follow("9-0")
    assert machine.entries([]) == [] and machine.need() == CheckStatus()
    machine.status(JobStatus.CANCELED)
    assert machine.need() == Read("9-0", 500)  # what the step that ended it stored is read once more
    assert machine.entries([]) == [] and machine.need() is None


def test_follow_reads_the_final_event_stored_between_an_empty_wait_and_the_status_check():
    machine = Follow("4-0")
    assert machine.entries([]) == [] and machine.need() == CheckStatus()
    machine.status(JobStatus.SUCCEEDED)
    assert machine.need() == Read("4-0", 500)
    assert machine.entries(entries("job.finished", start=5)) == entries("job.finished", start=5)
    assert machine.need() is None  # a short batch: all that was stored, so that end is the job's


def test_follow_goes_on_past_a_runs_end_that_a_resume_follows():
    machine = Follow()
    stored = entries("job.started", "job.finished", "job.resumed", "call.started", "job.finished")
    assert machine.entries(stored) == stored  # the first job.finished ended a run, not the job
    assert machine.need() is None


def test_follow_reads_on_after_an_end_that_ends_a_full_batch_and_goes_on_when_a_resume_follows():
    machine = Follow(batch=2)
    assert machine.entries(entries("job.started", "job.finished")) == entries("job.started", "job.finished")
    assert machine.need() == Read("2-0", 2)  # more may be stored after it: does a resume follow?
    assert machine.entries(entries("job.resumed", start=3)) == entries("job.resumed", start=3)
    assert machine.need() == Wait("3-0", 2)  # the resumed run's events are followed to its own end


def test_follow_stops_after_the_end_of_a_full_batch_when_what_follows_is_no_resume():
    machine = Follow(batch=1)
    machine.entries(entries("job.finished"))
    assert machine.need() == Read("1-0", 1)
    assert machine.entries(entries("call.finished", start=2)) == [] and machine.need() is None


def test_without_following_the_stored_events_are_read_until_a_short_batch():
    machine = Follow(follow=False, batch=2)
    machine.entries(entries("job.queued", "job.started"))
    assert machine.need() == Read("2-0", 2)
    machine.entries(entries("call.started", start=3))
    assert machine.need() is None


def drive(step, *replies):
    """Run `step` against canned replies: the batches it sent (as command names) and what it returned."""
    sent = []
    try:
        batch = next(step)
        for reply in replies:
            sent.append([command.name for command in batch])
            batch = step.send(reply)
        raise AssertionError(f"the step wants more: {batch}")
    except StopIteration as done:
        return sent, done.value


def ended(job_id: str, status: str, saved: str, **usage: int) -> dict[str, str]:
    """The job hash of an ended job: its status, its saved record and its usage counters."""
    return {"id": job_id, "status": status, "record": saved, **{f"usage.{k}": str(v) for k, v in usage.items()}}


def test_an_ended_jobs_record_is_one_round_trip_and_a_running_jobs_two():
    saved = '{"id": "job1", "status": "succeeded", "state": {"a": 1}}'
    sent, record = drive(core.record(KEYS), [ended("job1", "succeeded", saved, requests=2)])
    assert sent == [["hgetall"]] and record.state == {"a": 1}
    assert record.usage["requests"] == 2  # the usage as it stands (a request in flight at the end adds later)
    fields = {"id": "job1", "status": "running", "created_at": "2030-01-01T00:00:00Z"}
    sent, record = drive(core.record(KEYS), [fields], [fields, []])
    assert sent == [["hgetall"], ["hgetall", "lrange"]] and record.status is JobStatus.RUNNING
    with pytest.raises(JobNotFoundError):
        drive(core.record(KEYS), [{}])


def test_result_waits_in_one_pipeline_and_reads_the_status_when_the_signal_does_not_come():
    head = ended("job1", "failed", '{"id": "job1", "status": "failed"}')
    sent, record = drive(core.result(KEYS, 5, cluster=False), ["failed", head])
    assert sent == [["blmove", "hgetall"]] and record.status is JobStatus.FAILED
    sent, record = drive(core.result(KEYS, 5, cluster=True), ["failed"], [head])
    assert sent == [["blmove"], ["hgetall"]]  # a cluster pipeline carries no blocking command
    now = iter([0.0, 0.0, 10.0])
    with pytest.raises(JobTimeoutError, match="status: running"):
        drive(core.result(KEYS, 1, cluster=False, clock=lambda: next(now)), [None, {"status": "running"}],
              ["running"])


def test_the_records_of_a_job_listing_are_two_round_trips_whatever_its_length():
    jobs = [JobKeys("agentq", name) for name in ("ended", "gone", "running", "expiring")]
    saved = ended("ended", "succeeded", '{"id": "ended", "status": "succeeded"}')
    running = {"id": "running", "status": "running", "created_at": "2030-01-01T00:00:00Z"}
    sent, records = drive(core.records(jobs),
                          [saved, {}, running, {"id": "expiring", "status": "queued"}],
                          [running, [], {}, []])
    assert sent == [["hgetall"] * 4, ["hgetall", "lrange"] * 2]
    assert [(r.id, r.status) for r in records] == [("ended", JobStatus.SUCCEEDED), ("running", JobStatus.RUNNING)]
    assert drive(core.records([]), ) == ([], [])
