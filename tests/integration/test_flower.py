"""Flower tells the truth (docs/monitoring.md), with real processes: `celery -A agentq.celery flower` (the real Flower,
basic auth) and real `agentq worker` processes on the test's private Redis.

Flower learns everything from the workers' events, so each test first awaits Flower's view of the workers
(`/api/workers?status=1`, fed by their heartbeat events) and then awaits each task's final state in
`/api/tasks`; nothing sleeps. The activities are `tests/integration/ops_activities.py`.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.client import Client
from agentq.protocol.sensitive import REDACTED
from tests.integration.procs import ROOT, base_env, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

OPS = "tests.integration.ops_activities"
HOST = socket.gethostname()
GOOD, DECLINED = "4111 1111 1111 1111", "4000 0000 0000 0000"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Flower:
    """A real Flower process started as docs/monitoring.md says: `celery -A agentq.celery flower`, basic auth
    from `FLOWER_BASIC_AUTH`, task-runtime buckets up to minutes."""

    user, password = "ops", "s3cret"
    buckets = "0.5,1,5,15,30,60,120,300,600,1800"

    def __init__(self, redis_url: str, log_path: Path):
        self.port = _free_port()
        self.log_path = log_path
        env = base_env(redis_url, FLOWER_BASIC_AUTH=f"{self.user}:{self.password}")
        with open(log_path, "wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "agentq.celery", "flower", f"--port={self.port}",
                 "--address=127.0.0.1", f"--task_runtime_metric_buckets={self.buckets}"],
                env=env, cwd=str(log_path.parent), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, *, auth: bool = True, raw: bool = False) -> tuple[int, Any]:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                         headers={"Authorization": f"Basic {token}"} if auth else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                body = answer.read()
                return answer.status, body.decode() if raw else json.loads(body or b"null")
        except urllib.error.HTTPError as error:
            return error.code, None

    def up(self) -> bool:
        if self.popen.poll() is not None:
            pytest.fail(f"flower exited with {self.popen.returncode}:\n{self.output()}", pytrace=False)
        try:
            return self.get("/api/workers?status=1")[0] == 200
        except OSError:
            return False

    def alive_workers(self) -> dict:
        status, workers = self.get("/api/workers?status=1")
        return workers if status == 200 and isinstance(workers, dict) else {}

    def tasks(self) -> dict:
        status, tasks = self.get("/api/tasks")
        return tasks if status == 200 and isinstance(tasks, dict) else {}

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


@pytest.fixture
def flower(redis_url: str, tmp_path: Path) -> Iterator[Flower]:
    monitor = Flower(redis_url, tmp_path / "flower.log")
    try:
        wait_for(monitor.up, 30, "Flower's HTTP API", on_timeout=lambda: "\n" + monitor.output())
        yield monitor
    finally:
        monitor.stop()


def _task_of(flower: Flower, job_id: str, call_id: str, states: set[str], *, fields: tuple[str, ...] = ()) -> dict:
    """Await Flower's record of a call's task in one of `states`, with each of `fields` set: the events of one
    task sent by two workers (a retry runs on either) may reach Flower in any order."""
    uuid = f"{job_id}.{call_id}"

    def seen() -> dict | None:
        task = flower.tasks().get(uuid)
        if not task or task.get("state") not in states:
            return None
        return task if all(task.get(field) is not None for field in fields) else None

    return wait_for(seen, 30, f"Flower to show task {uuid} in {sorted(states)}",
                    on_timeout=lambda: f"\n{json.dumps(flower.tasks().get(uuid), indent=1)}")


def _flower_sees_alive(flower: Flower, name: str) -> None:
    wait_for(lambda: flower.alive_workers().get(name) is True, 30, f"Flower to see {name} alive",
             on_timeout=lambda: f"\n{flower.alive_workers()}\n{flower.output()}")


def test_flower_shows_failure_success_masked_arguments_and_real_worker_names(flower, worker_procs, redis_url):
    """Both attempts of the failing call run on one worker: Flower merges a task's events in the order they
    arrive, and a retry run by a second worker within milliseconds can report its end before the first worker's
    buffered `task-retried` arrives (Flower would then show RETRY, or the first attempt's `retries`)."""
    assert flower.get("/api/tasks", auth=False)[0] == 401  # basic auth is on
    default_name, custom_name = f"agentq-worker@{HOST}", f"ops-b@{HOST}"
    worker = worker_procs.start(module=OPS, pool="prefork", concurrency=1)
    worker_procs.wait_live(worker, ["opsCharge"])
    _flower_sees_alive(flower, default_name)

    with Client(redis_url) as client:
        handle = client.submit({
            "context": [{"type": "input", "_instance": "line_1", "data": {"sku": "A"}}],
            "calls": [
                {"_tool": "opsCharge", "orderId": "o1", "card": {"number": GOOD, "holder": "Ada"},
                 "_instance": "line_1", "_outputPath": "†state.paid"},
                {"_tool": "opsCharge", "orderId": "o2", "card": {"number": DECLINED, "holder": "Ada"},
                 "_outputPath": "†state.extra || †state.extraError"},
            ]})
        record = handle.result(timeout=30)
        calls = {c["status"]: c for c in handle.calls()}
    assert record["status"] == "succeeded", record  # the failure went to its `||` branch
    assert set(calls) == {"done", "failed"}
    done, failed = calls["done"], calls["failed"]
    assert sorted(worker_procs.store.redis.lrange("ops:received:", 0, -1)) == sorted([GOOD, DECLINED, DECLINED])

    shown_done = _task_of(flower, handle.id, done["id"], {"SUCCESS"})
    assert shown_done["name"] == "agentq.activity.opsCharge"
    assert shown_done["result"] == "'done'"
    assert shown_done["args"] == repr([handle.id, done["id"], {"tool": "opsCharge", "instance": "line_1"}])
    assert shown_done["kwargs"] == "{}"

    shown_failed = _task_of(flower, handle.id, failed["id"], {"FAILURE"}, fields=("retried",))
    assert shown_failed["retries"] == 1, json.dumps(shown_failed, indent=1)  # it went through RETRY
    assert shown_failed["retried"] < shown_failed["failed"]
    assert shown_failed["args"] == repr([handle.id, failed["id"], {"tool": "opsCharge", "instance": None}])
    assert shown_failed["exception"].startswith("CallFailedError(")
    assert f"RuntimeError: the issuer declined card {REDACTED}" in shown_failed["exception"]
    assert shown_done["worker"] == shown_failed["worker"] == default_name

    # a worker started with --hostname is shown by that name, on its tasks too
    named = worker_procs.start(module=OPS, pool="threads", concurrency=1, args=["--hostname", "ops-b@%h"])
    worker_procs.wait_live(named, ["opsCharge"])
    worker.stop()
    _flower_sees_alive(flower, custom_name)
    with Client(redis_url) as client:
        second = client.submit({"calls": [{"_tool": "opsCharge", "orderId": "o3",
                                           "card": {"number": GOOD, "holder": "Ada"}}]})
        assert second.result(timeout=30)["status"] == "succeeded"
        [only] = second.calls()
    assert _task_of(flower, second.id, only["id"], {"SUCCESS"})["worker"] == custom_name

    everything = json.dumps(flower.tasks())
    assert GOOD not in everything and DECLINED not in everything
    assert "orderId" not in everything and "Ada" not in everything  # no parameter at all

    status, metrics = flower.get("/metrics", auth=False, raw=True)  # Flower serves it without auth
    assert status == 200
    runtime = [line for line in metrics.splitlines() if line.startswith("flower_task_runtime_seconds_bucket")
               and 'task="agentq.activity.opsCharge"' in line]
    bounds = [line.split('le="', 1)[1].split('"', 1)[0] for line in runtime]  # one series per worker
    expected = [str(float(b)) for b in Flower.buckets.split(",")] + ["+Inf"]
    assert bounds[:len(expected)] == expected, runtime


def test_agentq_celery_is_the_app_configured_from_the_agentq_environment(redis_url):
    code = ("import sys, agentq, agentq.client; before = 'agentq.celery' in sys.modules\n"
            "import agentq.celery as m; c = m.app.conf\n"
            "print(before, c.broker_url, c.worker_send_task_events, c.task_send_sent_event, "
            "c.worker_prefetch_multiplier, c.task_acks_late, sorted(t for t in m.app.tasks if t.startswith('agentq')))")
    out = subprocess.run([sys.executable, "-c", code], env=base_env(redis_url), cwd=str(ROOT), capture_output=True,
                         text=True, timeout=60, check=True)
    # `import agentq` does not import it; it registers no agentq task (it is for monitoring, not for working)
    assert out.stdout.split() == ["False", redis_url, "True", "True", "1", "True", "[]"]
