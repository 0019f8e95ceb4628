"""A killed worker's unacknowledged task comes back even when a process of the fleet died holding kombu's lock on
the restore (`unacked_mutex`): killed, or cut from Redis by a restart or a pause, while it looked for tasks to
restore. kombu takes that lock for 300 s by default, so until it expired no process restored anything and every
call a killed worker held stalled for five minutes (the soak's seed 44 and seed 101, docs/design/soak.md).

The workers prefetch two tasks a slot here: with one (the default), an activity call's task on the store's Redis is
not noted unacknowledged at all (the admission's sweep sends it again), and no restore would be needed."""

from __future__ import annotations

import time

import pytest
from kombu import Connection

from agentq.client import Client
from agentq.runtime.app import broker_transport_options
from agentq.settings import Settings
from tests.integration.procs import FAST_ENV, wait_for

pytestmark = pytest.mark.timeout(90)


def _leave_the_restore_lock_held(redis_url: str) -> float:
    """Take kombu's restore lock as a process of this fleet takes it (its channel's options), and never give it
    back, as a process killed while holding it does; returns the lock's time to live (s)."""
    settings = Settings(visibility_timeout_s=float(FAST_ENV["AGENTQ_VISIBILITY_TIMEOUT_S"]))  # the workers' own
    with Connection(redis_url, transport_options=broker_transport_options(settings)) as connection:
        channel = connection.default_channel
        lock = channel.client.lock(channel.unacked_mutex_key, timeout=channel.unacked_mutex_expire)
        assert lock.acquire(blocking=False)
        return float(channel.unacked_mutex_expire)


def test_a_killed_workers_task_comes_back_though_a_dead_process_left_the_restore_locked(worker_procs, redis_url):
    workers = [worker_procs.start(["procSlow"], AGENTQ_PREFETCH_MULTIPLIER="2") for _ in range(2)]
    for proc in workers:
        worker_procs.wait_live(proc, ["procSlow"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit({"calls": [{"_tool": "procSlow", "seconds": 1.5, "tag": "lock",
                                           "_outputPath": "†state.slow"}]})
        pid = int(wait_for(lambda: store.redis.lindex("procs:pids:procSlow:lock", 0), 15, "procSlow to start"))
        held_s = _leave_the_restore_lock_held(redis_url)
        assert store.redis.pttl("unacked_mutex") > 0
        assert store.redis.hlen("unacked") == 1  # the task is noted: the restore brings it back
        next(p for p in workers if p.pid == pid).kill()
        killed_at = time.monotonic()
        record = handle.result(timeout=40)
        recovered_s = time.monotonic() - killed_at
    assert record["status"] == "succeeded", record
    assert held_s <= 5, f"kombu's restore lock is taken for {held_s} s"
    assert recovered_s < 3 + held_s + 10, f"the killed worker's task came back after {recovered_s:.1f} s"
