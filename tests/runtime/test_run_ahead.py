"""Idempotent activities: a signed task's call runs before its claim, and one store step (settle.lua) claims and
commits it. Runs the executor on the session's private Redis (the real scripts) with a recording dispatcher that
signs what it sends, as `runtime/app.py`'s dispatcher does."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentq.engine.signing import TaskSigner
from agentq.protocol.digests import record_digest
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.replies import SettleOutcome, SettleStaleTool
from agentq.store.state import StateStore
from tests.runtime.conftest import Rig, tool_schema

pytestmark = pytest.mark.timeout(20)


class SignedRig(Rig[StateStore]):
    """A rig on real Redis whose executor checks signatures; `drain` delivers each task signed."""

    def __init__(self, store: StateStore):
        self.signer = TaskSigner(RedisFleet(store).task_signing_key)
        super().__init__(store, Settings(), signer=self.signer)
        self.steps: Counter[str] = Counter()
        for name in ("claim", "commit", "settle"):
            self._count(store, name)

    def _count(self, store: StateStore, name: str) -> None:
        step = getattr(store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.steps[name] += 1
            return step(*args, **kwargs)

        setattr(store, name, counted)

    def deliver(self, job_id: str, record: CallRecord, *, signature: str | None = "valid") -> str:
        if signature == "valid":
            signature = self.signer.sign(job_id, record.id, record_digest(record))
        outcome = self.executor.run_call(job_id, record.id, record=record, signature=signature)
        self.outcomes.append((record.tool, outcome))
        return outcome.status

    def drain(self, limit: int = 50) -> list[str]:
        statuses = []
        while self._next < len(self.dispatcher.sent) and limit:
            job_id, record = self.dispatcher.sent[self._next]
            statuses.append(self.deliver(job_id, record))
            limit -= 1
            if statuses[-1] != "retry":
                self._next += 1
        return statuses


@pytest.fixture
def rig(redis_url: str) -> Iterator[SignedRig]:
    store = StateStore(redis_url)
    rig = SignedRig(store)
    yield rig
    rig.executor.leases.stop()
    store.close()


def calls(n: int, tool: str = "noop") -> list[dict]:
    return [{"_tool": tool, "i": i, "_outputPath": f"†state.r{i}"} for i in range(n)]


def snapshot(store: StateStore, job_id: str) -> dict[str, Any]:
    """Every key of the job with its content."""
    read = {"hash": store.redis.hgetall, "list": lambda k: store.redis.lrange(k, 0, -1), "stream": store.redis.xrange,
            "string": store.redis.get, "set": store.redis.smembers}
    keys = [*store.keys(job_id).all, store.keys(job_id).done]
    return {key: read[store.redis.type(key)](key) for key in keys if store.redis.exists(key)}


def per_call(events: list[dict]) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for event in events:
        if "call_id" in event:
            seen.setdefault(event["call_id"], []).append(event["event"])
    return seen


def test_an_idempotent_activitys_calls_are_settled_in_one_step_each(rig: SignedRig):
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    job_id = rig.submit({"calls": calls(5)})
    assert rig.drain() == ["done"] * 5
    # the first call: this process had no copy of the tool yet, so it was claimed first; the others settled
    assert rig.steps == {"claim": 1, "commit": 1, "settle": 4}
    record = rig.store.record(job_id)
    assert (record.status, record.state) == (JobStatus.SUCCEEDED, {f"r{i}": i for i in range(5)})
    assert rig.runs == {"noop": 5}
    events = rig.events(job_id)
    names = [e["event"] for e in events]
    assert names[:2] == ["job.queued", "job.started"] and names[-1] == "job.finished"
    assert names.count("job.started") == 1
    assert all(seq == ["call.started", "call.finished"] for seq in per_call(events).values())
    settled = [e for e in events if e["event"] == "call.started"][-1]
    assert settled["attempt"] == 1 and settled["part"]["tools"][0]["arguments"] == {"i": 4}
    finished = [e for e in events if e["event"] == "call.finished"][-1]
    assert finished["status"] == "done" and finished["part"]["results"][0]["content"] == "4"
    assert finished["part"]["technical_details"]["arguments"] == {"i": 4}
    assert rig.store.redis.hgetall(rig.store.keys(job_id).attempts) == {r.id: "1" for _, r in rig.dispatcher.sent}

    rig.steps.clear()  # a new job: the tool copy of the last one is used (and confirmed by the settle step)
    second = rig.submit({"calls": calls(3)})
    assert rig.drain() == ["done"] * 3 and rig.steps == {"settle": 3}
    assert rig.store.record(second).state == {f"r{i}": i for i in range(3)}


def test_idempotent_calls_settle_on_a_redis_cluster(local_cluster: Any):
    """settle.lua touches only the job's keys (one hash slot); the signing secret is one fleet key."""
    local_cluster.flush()
    store = StateStore(local_cluster.url, cluster=True)
    rig = SignedRig(store)
    try:
        rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
        for _ in range(2):
            job_id = rig.submit({"calls": calls(4)})
            assert rig.drain() == ["done"] * 4
            assert rig.store.record(job_id).state == {f"r{i}": i for i in range(4)}
        assert rig.steps == {"claim": 1, "commit": 1, "settle": 7}
    finally:
        rig.executor.leases.stop()
        store.close()


def test_a_task_not_signed_by_agentq_is_claimed_first_and_runs_the_stored_call(rig: SignedRig):
    seen: list[Any] = []

    def noop(call: dict) -> Any:
        seen.append(call["i"])
        return call["i"]

    rig.activity("noop", noop, {"i": {"type": "integer"}}, idempotent=True)
    job_id = rig.submit({"calls": calls(3)})
    (_, first), (_, second), (_, third) = rig.dispatcher.sent
    assert rig.deliver(job_id, first) == "done"  # now the process has the tool
    forged = CallRecord.from_dict({**second.to_dict(), "call": {**second.call, "i": 666}})
    assert rig.deliver(job_id, forged, signature=rig.signer.sign(job_id, second.id, record_digest(second))) == "done"
    assert rig.deliver(job_id, third, signature=None) == "done"  # unsigned: the usual path
    assert seen == [0, 1, 2]  # the forged parameters never ran
    assert rig.steps == {"claim": 3, "commit": 3}
    assert rig.store.record(job_id).state == {"r0": 0, "r1": 1, "r2": 2}


def test_a_second_delivery_records_nothing_twice(rig: SignedRig):
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    job_id = rig.submit({"calls": calls(2)})
    assert rig.drain() == ["done", "done"]
    _, again = rig.dispatcher.sent[1]
    assert rig.deliver(job_id, again) == "finished"  # it ran again (idempotent), and was recorded once
    assert rig.runs == {"noop": 3}
    assert [e["event"] for e in rig.events(job_id)].count("call.finished") == 2
    assert len(rig.store.read_log(job_id)) == 2
    assert rig.store.record(job_id).status is JobStatus.SUCCEEDED


def test_a_failed_run_is_recorded_by_the_usual_path_without_running_again(rig: SignedRig):
    failures = iter([RuntimeError("flaky")])

    def flaky(call: dict) -> int:
        error = next(failures, None)
        if error is not None:
            raise error
        return int(call["i"])

    rig.activity("flaky", flaky, {"i": {"type": "integer"}}, idempotent=True, retries=1, retry_backoff=0.01)
    job_id = rig.submit({"calls": [{"_tool": "flaky", "i": 7, "_outputPath": "†state.r"}]})
    # no copy of the tool yet: claimed first, fails, retried; the retry runs ahead, is not the first attempt,
    # so the usual path records it
    assert rig.drain() == ["retry", "done"]
    failures = iter([RuntimeError("flaky again")])
    job2 = rig.submit({"calls": [{"_tool": "flaky", "i": 8, "_outputPath": "†state.r"}]})
    assert rig.drain() == ["retry", "done"]  # ran ahead and failed: claimed, recorded, retried
    assert rig.runs["flaky"] == 4  # two per job: the failed attempt and the retry, never one more
    events = [e["event"] for e in rig.events(job2)]
    assert events == ["job.queued", "job.started", "call.started", "call.retrying", "call.started",
                      "call.finished", "job.finished"]
    assert rig.store.record(job2).state == {"r": 8} and rig.store.record(job_id).state == {"r": 7}


def test_a_job_tool_unlike_the_copy_at_hand_is_rendered_from_the_jobs_own(rig: SignedRig):
    rig.activity("show", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)

    def shown(name: str) -> dict:
        return {**tool_schema("show", {"i": {"type": "integer"}}), "x-display": {"friendly_name": name}}

    for name in ("Old", "New"):
        job_id = rig.submit({"tools": [shown(name)], "calls": calls(2, "show")})
        assert rig.drain() == ["done", "done"]
        started = [e for e in rig.events(job_id) if e["event"] == "call.started"]
        assert [e["part"]["display_info"]["friendly_name"] for e in started] == [name, name]
    assert rig.steps["settle"] >= 2


def test_a_call_of_a_job_canceled_while_it_ran_ahead_is_canceled(rig: SignedRig):
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    rig.submit({"calls": calls(1)})
    rig.drain()  # the process has the tool now
    job_id = rig.submit({"calls": calls(1)})
    rig.service.cancel(job_id)
    _, record = rig.dispatcher.sent[-1]
    assert rig.deliver(job_id, record) == "canceled"
    assert rig.store.call_statuses(job_id)[record.id] is CallStatus.CANCELED
    assert rig.store.read_log(job_id) == [] and "call.finished" not in [e["event"] for e in rig.events(job_id)]


def test_parts_an_activity_emits_while_running_ahead_come_between_its_start_and_its_end(rig: SignedRig):
    def chatty(call: dict, context: Any) -> int:
        context.emit({"activity_type": "thought", "content": f"working on {call['i']}"})
        return int(call["i"])

    rig.tools.register("chatty", tool_schema("chatty", {"i": {"type": "integer"}}))
    rig.activities.register("chatty", chatty, idempotent=True)
    job_id = rig.submit({"calls": [*calls(1, "chatty"), *calls(1, "chatty")]})
    assert rig.drain() == ["done", "done"]
    assert rig.steps["settle"] == 1
    for sequence in per_call(rig.events(job_id)).values():
        assert sequence == ["call.started", "part", "call.finished"]


def test_a_job_id_used_again_is_started_again(rig: SignedRig):
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    for _ in range(2):
        job_id = rig.service.submit({"calls": calls(2)}, job_id="job_again")
        assert rig.drain() == ["done", "done"]
        names = [e["event"] for e in rig.events(job_id)]
        assert names[:2] == ["job.queued", "job.started"] and names[-1] == "job.finished"
        store = rig.store
        store.redis.delete(*store.keys(job_id).all, store.keys(job_id).done)  # as if it expired
    # the first call of the first job was claimed (no tool copy yet); the second job's first settle step found
    # the job not started (this process took it for started), and was taken again with its job.started
    assert rig.steps["settle"] == 4


@pytest.mark.parametrize("case", ["stored record", "attempted", "tool"])
def test_the_settle_step_writes_nothing_unless_it_may(rig: SignedRig, case: str):
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}}, idempotent=True)
    job_id = rig.submit({"calls": calls(1)})
    _, record = rig.dispatcher.sent[0]
    store = rig.store
    tool_json = store.redis.hget(store.keys(job_id).tools, "noop")
    tool_sha = __import__("hashlib").sha1(tool_json.encode()).hexdigest()
    record_sha = record_digest(record)
    if case == "stored record":
        record_sha = "0" * 40
    elif case == "attempted":
        store.redis.hset(store.keys(job_id).attempts, record.id, 1)
    else:
        tool_sha = "0" * 40
    before = snapshot(store, job_id)
    settle = store.settle(job_id, record.id, record_sha=record_sha, tool="noop", tool_sha=tool_sha,
                          job_started=None, status=CallStatus.DONE,
                          messages=[{"type": "state", "data": {"r0": 0}}], events=[])
    expected = SettleOutcome.STALE_TOOL if case == "tool" else SettleOutcome.OTHER
    assert settle.outcome is expected
    if case == "tool":
        assert isinstance(settle, SettleStaleTool) and settle.tool == json.loads(tool_json)
    assert snapshot(store, job_id) == before
