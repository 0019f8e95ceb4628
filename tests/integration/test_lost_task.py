"""A task a worker took off its queue and died before recording as unacknowledged: its call moves again within
seconds, not after `AGENTQ_ADMISSION_REPUBLISH_S` (300 s).

Kombu's Redis transport takes a task off its queue (BRPOP), then records it as unacknowledged: a worker killed
between the two loses it, and no restore brings it back. The soak found one such call (seed 52, a worker killed
as its job started: the call `ready`, admitted, its task neither queued nor unacknowledged). The admission's sweep
now looks, at each heartbeat, for admitted calls still ready a heartbeat after their admission whose task the broker
holds nowhere, and publishes them again; a copy of a task a worker does hold runs nothing twice (a call is claimed
once).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from agentq.client import Client
from tests.integration.procs import WorkerProcs, ledger_runs, take_engine_tasks, wait_for

QUEUE = "agentq.activity.procCharge"
LOST = "had lost their task"


@pytest.mark.timeout(90)
def test_a_task_taken_off_its_queue_by_a_worker_that_died_is_published_again_within_seconds(redis_url: str,
                                                                                             tmp_path: Path):
    ledger = tmp_path / "ledger.txt"
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        worker = procs.start(["procCharge"], concurrency=2, PROCS_LEDGER=str(ledger), AGENTQ_HEARTBEAT_S="1",
                             AGENTQ_PREFETCH_MULTIPLIER="1", AGENTQ_ADMISSION_REPUBLISH_S="300",
                             AGENTQ_LEASE_S="10", AGENTQ_VISIBILITY_TIMEOUT_S="300")
        procs.wait_live(worker, ["procCharge"])
        with Client(redis_url) as client, redis.Redis.from_url(redis_url) as broker:
            handle = client.submit({"context": [{"type": "state", "data": {}}], "calls": [
                {"_tool": "procCharge", "seconds": 1.5, "tag": f"c{i}", "_outputPath": f"†state.c{i}"}
                for i in range(5)]})
            wait_for(lambda: sum(ledger_runs(ledger).values()) == 2 and broker.llen(QUEUE) == 3, 20,
                     "two charges to run and three tasks to wait on their queue")
            assert broker.rpop(QUEUE) is not None  # taken by a worker that died before recording it
            lost_at = time.monotonic()
            record = handle.result(timeout=40)
            ended_s = time.monotonic() - lost_at
    finally:
        output = worker.output()
        procs.close()
    assert record["status"] == "succeeded", record
    assert ledger_runs(ledger) == Counter({f"c{i}": 1 for i in range(5)})  # the lost one too, once
    assert "1 admitted call(s) had lost their task" in output, output[-2000:]
    assert ended_s < 15, f"the job ended {ended_s:.1f} s after its task was lost"


GONE = re.compile(r"a process of the fleet is gone: of \d+ active jobs, (\d+) engine call\(s\) and (\d+) tick")


@pytest.mark.timeout(90)
def test_an_engine_task_lost_with_a_killed_process_is_published_again_when_the_fleet_sees_it_gone(redis_url: str,
                                                                                                  tmp_path: Path):
    """The soak's seed 104: a `sleep` call `ready`, its task on no queue, after dispatchers were killed. Nothing
    admits an engine task: when a process of the fleet is gone, the sweep looks at the active jobs for them."""
    env = {"AGENTQ_HEARTBEAT_S": "1", "AGENTQ_ADMISSION_REPUBLISH_S": "300", "AGENTQ_LEASE_S": "10",
           "AGENTQ_VISIBILITY_TIMEOUT_S": "300"}
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        survivor = procs.start(["procA"], concurrency=1, **env)  # sweeps the admission; serves no engine task
        victim = procs.start(["procB"], concurrency=1, **env)  # the process that dies (a dispatcher, in the soak)
        procs.wait_live(survivor, ["procA"])
        procs.wait_live(victim, ["procB"])
        with Client(redis_url) as client, redis.Redis.from_url(redis_url) as broker:
            wait_for(lambda: str(victim.pid) in str(broker.get("agentq:{admission}:live")), 10,
                     "a sweep to see both processes live")
            handle = client.submit({"tools": ["sleep"], "calls": [
                {"_tool": "sleep", "seconds": 0.1, "_outputPath": "†state.slept"}]})
            wait_for(lambda: take_engine_tasks(broker) == 1, 10, "the sleep's task, taken off its queue")
            victim.kill()
            said = wait_for(lambda: GONE.search(survivor.output()), 15, "the sweep to see the killed process gone")
            dispatcher = procs.dispatcher(**env)
            procs.wait_dispatcher(dispatcher)
            record = handle.result(timeout=20)
    finally:
        procs.close()
    assert said.groups() == ("1", "0"), said.string[-2000:]
    assert record["status"] == "succeeded" and "woke_at" in record["state"]["slept"], record


def _unacked(broker: redis.Redis, job_id: str) -> int:
    """How many of the job's tasks the broker holds as unacknowledged."""
    return sum(job_id.encode() in entry for entry in broker.hvals("unacked"))


@pytest.mark.timeout(90)
def test_a_running_call_whose_process_died_and_whose_task_is_held_nowhere_is_published_again(redis_url: str,
                                                                                              tmp_path: Path):
    """A worker killed while its call runs: the call `running`, admitted, its lease gone with the worker, its task
    neither queued nor unacknowledged (the broker being the store's Redis, an activity call's delivery is not noted:
    the store recovers it). The sweep looks at `running` calls whose lease is gone too (the soak's seed 109 found one
    before, whose delivery a killed worker never noted), and the copy it publishes takes the call over."""
    ledger = tmp_path / "ledger.txt"
    env = {"PROCS_LEDGER": str(ledger), "AGENTQ_HEARTBEAT_S": "1", "AGENTQ_ADMISSION_REPUBLISH_S": "300",
           "AGENTQ_LEASE_S": "2", "AGENTQ_VISIBILITY_TIMEOUT_S": "300"}
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        survivor = procs.start(["procA"], concurrency=1, **env)  # sweeps the admission; serves no charge
        victim = procs.start(["procCharge"], concurrency=1, **env)
        procs.wait_live(survivor, ["procA"])
        procs.wait_live(victim, ["procCharge"])
        with Client(redis_url) as client, redis.Redis.from_url(redis_url) as broker:
            handle = client.submit({"context": [{"type": "state", "data": {}}], "calls": [
                {"_tool": "procCharge", "seconds": 3, "tag": "c", "_outputPath": "†state.c"}]})
            wait_for(lambda: ledger_runs(ledger)["c"] == 1, 20, "the charge to start on the victim")
            victim.kill()
            assert _unacked(broker, handle.id) == 0  # its delivery was never noted: lost with it
            runner = procs.start(["procCharge"], concurrency=1, **env)
            procs.wait_live(runner, ["procCharge"])
            record = handle.result(timeout=30)
    finally:
        output = "".join(proc.output() for proc in procs.procs)  # whichever swept
        procs.close()
    assert record["status"] == "succeeded", record
    assert ledger_runs(ledger)["c"] == 2  # the killed run, then the one that took the call over
    assert "1 admitted call(s) had lost their task (a worker killed as it took it, likely; 1 of them running" \
        in output, output[-2000:]


SWEEPING = {"AGENTQ_HEARTBEAT_S": "1", "AGENTQ_ADMISSION_REPUBLISH_S": "300", "AGENTQ_LEASE_S": "10",
            "AGENTQ_VISIBILITY_TIMEOUT_S": "300"}


@contextmanager
def _a_procB_job_and_a_victim(redis_url: str, tmp_path: Path) -> Iterator[tuple[WorkerProcs, Any, Any, Any, Any]]:
    """A fleet of a survivor (sweeps the admission, serves procA) and a victim (serves procEcho), once a sweep saw
    both live, and a job of one procB call (procB known: a worker announced it and left, none serves it now); yields
    the processes, the survivor, the victim, the job's handle and a client of the broker."""
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        announcer = procs.start(["procB"], concurrency=1, **SWEEPING)  # makes procB known, then leaves
        procs.wait_live(announcer, ["procB"])
        announcer.stop()
        survivor = procs.start(["procA"], concurrency=1, **SWEEPING)
        victim = procs.start(["procEcho"], concurrency=1, **SWEEPING)  # the process that dies
        procs.wait_live(survivor, ["procA"])
        procs.wait_live(victim, ["procEcho"])
        with Client(redis_url) as client, redis.Redis.from_url(redis_url) as broker:
            wait_for(lambda: str(victim.pid) in str(broker.get("agentq:{admission}:live")), 10,
                     "a sweep to see both processes live")
            handle = client.submit({"calls": [{"_tool": "procB", "a": 4, "_outputPath": "†state.b"}],
                                    "context": [{"type": "state", "data": {}}]})
            yield procs, survivor, victim, handle, broker
    finally:
        procs.close()


@pytest.mark.timeout(90)
def test_a_ready_call_nobody_admitted_is_admitted_when_the_fleet_sees_a_process_gone(redis_url: str, tmp_path: Path):
    """The soak's seed 109 (a replay): `acme-agent88` `running`, its tick's activity call `ready`, never admitted,
    its task nowhere, after dispatchers were killed. A call made ready by a process that died before admitting it
    (here: its place given back and its task dropped, as if never admitted) is admitted by the sweep's look after a
    death."""
    from agentq.protocol.admission import AdmissionConfig, admission_member
    from agentq.store.state import StateStore

    with _a_procB_job_and_a_victim(redis_url, tmp_path) as (procs, _survivor, victim, handle, broker):
        wait_for(lambda: broker.llen("agentq.activity.procB") == 1, 10, "the call's task on its queue")
        broker.delete("agentq.activity.procB")  # never sent ...
        call_id = handle.calls()[0]["id"]
        store = StateStore(redis_url)
        store.admit_calls([], AdmissionConfig(default_window=8), ended=[admission_member(handle.id, call_id)])
        assert not store.admitted_before(2**62)  # ... nor admitted
        victim.kill()
        wait_for(lambda: UNADMITTED in "".join(p.output() for p in procs.procs), 15, "the sweep to admit the call")
        runner = procs.start(["procB"], concurrency=1, **SWEEPING)
        procs.wait_live(runner, ["procB"])
        record = handle.result(timeout=20)
    assert record["status"] == "succeeded", record


UNADMITTED = "1 ready call(s) that nobody admitted"


ENDED = "1 plan job(s) due their end are sent an ended call's task"


@pytest.mark.timeout(90)
def test_a_plan_job_whose_last_call_committed_as_its_process_died_is_ended_when_the_fleet_sees_it_gone(
        redis_url: str, tmp_path: Path):
    """A call's task is not noted unacknowledged where the broker is the store's Redis: a worker killed between
    committing a plan job's last call and ending the job leaves no task to deliver again. The sweep's look after a
    death finds the job due its end and sends an ended call's task again; its delivery ends the job."""
    from agentq.protocol.status import CallStatus
    from agentq.store.state import StateStore

    with _a_procB_job_and_a_victim(redis_url, tmp_path) as (procs, survivor, victim, handle, broker):
        wait_for(lambda: broker.rpop("agentq.activity.procB") is not None, 10, "the call's task, taken")
        call_id = handle.calls()[0]["id"]
        store = StateStore(redis_url)  # the call claimed and committed, as by the victim, which then dies
        store.claim(handle.id, call_id, token="victim", lease_ms=10_000)
        store.commit(handle.id, call_id, token="victim", status=CallStatus.DONE,
                     messages=[{"type": "data", "kind": "state", "data": {"b": 8}, "_path": "†state.b",
                                "_outputMethod": "set"}])
        assert handle.status() == "running"
        victim.kill()
        wait_for(lambda: ENDED in survivor.output(), 15, "the sweep to see the victim gone and end the job")
        runner = procs.start(["procB"], concurrency=1, **SWEEPING)
        procs.wait_live(runner, ["procB"])
        record = handle.result(timeout=20)
    assert record["status"] == "succeeded" and record["state"] == {"b": 8}, record
