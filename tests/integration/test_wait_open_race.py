"""A wait's timer entry is written before its wait opens (so a process killed in between leaves no waiting call
without a timer). A dispatcher's timer round that takes the entry in between — a `sleep` of 0 s is due at once, and
a store restart retries the open after its due time has passed — must not drop it: the wait opens a moment later
and is fired then. Real Redis, a real in-process Celery worker (its own timer loop idle), a
second dispatcher's timer loop firing."""

from __future__ import annotations

from typing import Any

from agentq.runtime.timers import TimerLoop
from agentq.store.state import StateStore
from tests.integration.procs import wait_for
from tests.integration.timers import due_timers


def test_a_timer_round_between_the_timer_write_and_the_wait_open_does_not_lose_the_sleep(harness, monkeypatch):
    worker = harness.worker(timer_poll_s=3600)  # its own timer loop stays out of the way
    store = worker.runtime.store
    assert isinstance(store, StateStore)
    other = harness.runtime()  # another dispatcher: one round in the window, then its loop polling
    other_loop = TimerLoop(other.store, other.executor.waits, interval_s=0.1)
    harness.on_close(other_loop.stop)
    runner = store.waits._waits
    real_run = runner.run
    rounds: list[tuple[int, list[str]]] = []

    def run(name: str, keys: Any, args: Any) -> Any:
        if name == "wait_open" and not rounds:  # the entry is written, the wait not open yet
            rounds.append((other_loop.run_once(), due_timers(store.redis)))
            other_loop.start()
        return real_run(name, keys, args)

    monkeypatch.setattr(runner, "run", run)
    client = harness.client()
    handle = client.submit({"tools": ["sleep"], "calls": [{"_tool": "sleep", "seconds": 0,
                                                            "_outputPath": "†state.slept"}]})
    record = handle.result(timeout=20)
    assert rounds and rounds[0][0] == 1  # the other dispatcher took the entry before the wait opened
    assert len(rounds[0][1]) == 1  # and left it (due again shortly), not dropped
    assert record["status"] == "succeeded" and "woke_at" in record["state"]["slept"]
    wait_for(lambda: due_timers(store.redis) == [], 5, "the timer to be dropped")  # closed after the job's step
