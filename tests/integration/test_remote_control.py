"""Celery remote control from any process on the broker: inspection yes, changing the fleet only when allowed.

A plain Celery app (the broker's URL, no agentq code) broadcasts `shutdown`, `pool_shrink` and the like to real
`agentq worker` processes. With the default `AGENTQ_REMOTE_CONTROL=read` they refuse (an error reply, a warning
in their log), keep serving (a job still completes) and still answer what Flower asks (ping, stats,
active_queues, registered, conf, active, ...); a worker started with `AGENTQ_REMOTE_CONTROL=all` obeys.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from agentq.client import Client
from agentq.runtime.remote_control import allowed_commands, refusal_message
from tests.integration.procs import WorkerProc, wait_for, worker_procs  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def outsider(redis_url: str) -> Iterator[Any]:
    """A plain Celery app on the same broker: what any process that can reach the broker can build."""
    app = Celery("outsider", broker=redis_url, set_as_current=False)
    try:
        yield app
    finally:
        app.close()


def _node(outsider: Any, proc: WorkerProc) -> str:
    """The Celery node name of a worker process, from its `stats` reply."""
    def find() -> str | None:
        stats = outsider.control.inspect(timeout=1.0).stats() or {}
        return next((name for name, reply in stats.items() if reply.get("pid") == proc.pid), None)

    return wait_for(find, 20, f"worker {proc.pid} to answer stats")


def _replies(outsider: Any, command: str, node: str, **arguments: Any) -> dict:
    replies = outsider.control.broadcast(command, arguments=arguments, destination=[node], reply=True,
                                         timeout=2.0)
    return {name: reply for item in replies for name, reply in item.items()}


def _run_a_job(redis_url: str, x: int) -> dict:
    with Client(redis_url) as client:
        return client.submit({"calls": [{"_tool": "procA", "x": x, "_outputPath": "†state.a"}]}).result(timeout=30)


def test_a_broadcast_from_a_plain_celery_app_cannot_stop_or_resize_the_workers(worker_procs, redis_url,  # noqa: F811
                                                                                 outsider):
    proc = worker_procs.start(["procA"], pool="prefork", concurrency=2)
    worker_procs.wait_live(proc, ["procA"])
    node = _node(outsider, proc)

    for command, arguments in [("shutdown", {}), ("pool_shrink", {"n": 1}), ("pool_grow", {"n": 3}),
                               ("cancel_consumer", {"queue": "agentq.activity.procA"}), ("rate_limit",
                                {"task_name": "agentq.activity.procA", "rate_limit": "1/h"}),
                               ("revoke", {"task_id": "x", "terminate": True})]:
        reply = _replies(outsider, command, node, **arguments)
        name = "revoke with terminate" if command == "revoke" else command
        assert reply == {node: {"error": refusal_message(name)}}, (command, reply)
    outsider.control.broadcast("shutdown")  # no reply asked, to every worker: the way it stopped them all

    # still serving: a job completes, its pool kept its size and its queue its consumer
    assert _run_a_job(redis_url, 1)["state"]["a"]["value"] == 2
    assert proc.alive()
    assert "remote control command 'shutdown' refused" in proc.output()
    inspect = outsider.control.inspect(timeout=2.0, destination=[node])
    assert inspect.ping() == {node: {"ok": "pong"}}
    stats = inspect.stats()[node]
    assert len(stats["pool"]["processes"]) == 2
    assert "agentq.activity.procA" in {queue["name"] for queue in inspect.active_queues()[node]}
    # the rest of what Flower reads answers too, and so does agentq's revoke (its cancel uses it)
    assert "agentq.activity.procA" in inspect.registered()[node]
    assert inspect.conf()[node]["task_acks_late"] is True
    assert inspect.active()[node] == [] and inspect.reserved()[node] == [] and inspect.scheduled()[node] == []
    assert "flagged as revoked" in _replies(outsider, "revoke", node, task_id="job_x.call_y")[node]["ok"]
    assert "job_x.call_y" in inspect.revoked()[node]
    assert _replies(outsider, "enable_events", node)[node] in ({"ok": "task events enabled"},
                                                               {"ok": "task events already enabled"})


def test_with_remote_control_all_a_broadcast_shutdown_stops_the_worker(worker_procs, redis_url,  # noqa: F811
                                                                       outsider):
    proc = worker_procs.start(["procA"], AGENTQ_REMOTE_CONTROL="all")
    worker_procs.wait_live(proc, ["procA"])
    node = _node(outsider, proc)
    assert _run_a_job(redis_url, 2)["state"]["a"]["value"] == 3
    outsider.control.broadcast("shutdown", destination=[node])
    wait_for(lambda: not proc.alive(), 30, "the worker to stop on a remote shutdown",
             on_timeout=lambda: f"\n--- worker output ---\n{proc.output()}")
    assert proc.popen.returncode == 0


def test_read_mode_serves_what_flower_calls_and_nothing_that_changes_the_fleet():
    from celery.worker.control import Panel
    from flower.inspector import Inspector

    allowed = allowed_commands(Panel.meta)
    flower = {*Inspector.inspect_methods, "ping", "enable_events", "revoke"}
    assert flower <= allowed
    fleet = {"shutdown", "pool_grow", "pool_shrink", "pool_restart", "autoscale", "add_consumer", "cancel_consumer",
             "rate_limit", "time_limit", "terminate", "disable_events", "election", "revoke_by_stamped_headers"}
    assert not fleet & allowed
    assert {"dump_active", "dump_reserved", "dump_schedule", "dump_revoked"} <= allowed  # aliases of inspections
