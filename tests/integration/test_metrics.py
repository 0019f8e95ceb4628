"""Prometheus metrics (docs/metrics.md) with real processes: a prefork `agentq worker` counts into multiprocess files,
`agentq metrics` serves them with the fleet's state over HTTP; in-process workers for the fleet gauges, the
model's requests (the real SDK against the fake Messages API) and the store's bookkeeping.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentq.client import Client
from agentq.metrics import render_metrics
from agentq.protocol.records import WorkerAnnouncement
from agentq.runtime.root import connect
from agentq.store.fleet import RedisFleet
from agentq.store.fleet_stats import RedisStats
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.conftest import Harness, store_of, tool_schema
from tests.integration.procs import ROOT, base_env, wait_for

pytestmark = pytest.mark.timeout(120)

METRICS_MODULE = "tests.integration.metrics_activities"
TOKEN = "scrape-token-for-tests"


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value of a Prometheus text exposition (parsed by prometheus_client's parser)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float | None:
    """A sample's value; the job and call counters' `tenant` label is `default` unless `labels` name one."""
    if name in ("agentq_calls_total", "agentq_jobs_total"):
        labels.setdefault("tenant", "default")
    return found.get((name, frozenset(labels.items())))


def attempts_counted(found: dict) -> float:
    """The attempts counted in `agentq_calls_total`, whatever their labels."""
    return sum(v for (name, _), v in found.items() if name == "agentq_calls_total")


def counted(server: MetricsProcess, status: str, attempts: int) -> dict:
    """The first scrape that counts a job's end (`status`) and `attempts` attempts: a worker counts an attempt just
    after its commit, and the commit of a plan job's last call may be the step that ends the job."""
    return wait_for(lambda: value(found := samples(server.scrape()), "agentq_jobs_total", status=status)
                    and attempts_counted(found) == attempts and found, 15,
                    f"the job's end and {attempts} attempts to be counted")


class MetricsProcess:
    """`agentq metrics --port 0` in its own process; the port it chose is read from its first line."""

    def __init__(self, redis_url: str, metrics_dir: Path, log_path: Path):
        env = base_env(redis_url, AGENTQ_METRICS_DIR=str(metrics_dir), AGENTQ_METRICS_TOKEN=TOKEN)
        self.log_path = log_path
        self.popen = subprocess.Popen([sys.executable, "-m", "agentq.cli", "metrics", "--port", "0"], env=env,
                                      cwd=str(ROOT), stdout=subprocess.PIPE, stderr=open(log_path, "wb"),  # noqa: SIM115
                                      text=True, start_new_session=True)
        line = self.popen.stdout.readline()  # type: ignore[union-attr]
        if "serving http://" not in line:
            self.stop()
            pytest.fail(f"agentq metrics did not start: {line!r}\n{log_path.read_text()}", pytrace=False)
        self.url = line.split("serving ", 1)[1].strip()

    def scrape(self, token: str | None = TOKEN) -> str:
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(request, timeout=15) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            return response.read().decode()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(10)


@pytest.fixture
def metrics_process(redis_url: str, tmp_path: Path):
    started: list[MetricsProcess] = []

    def start(metrics_dir: Path) -> MetricsProcess:
        started.append(MetricsProcess(redis_url, metrics_dir, tmp_path / f"metrics-{len(started)}.log"))
        return started[-1]

    yield start
    for process in started:
        process.stop()


def _job(tag: str) -> dict:
    return {"calls": [
        {"_tool": "metOk", "sleep": 0.3, "_outputPath": "†state.slow"},
        {"_tool": "metOk", "_outputPath": "†state.fast"},
        {"_tool": "metFlaky", "tag": tag, "_outputPath": "†state.flaky"},
        {"_tool": "metBad", "_outputPath": "†state.bad"},
    ]}


def test_metrics_of_a_job_run_by_a_prefork_worker_served_by_agentq_metrics(worker_procs, redis_url, tmp_path,
                                                                           metrics_process):
    metrics_dir = tmp_path / "metrics"
    worker = worker_procs.start(["procA"], pool="prefork", concurrency=2, args=["-m", METRICS_MODULE],
                                AGENTQ_METRICS_DIR=str(metrics_dir))
    worker_procs.wait_live(worker, ["metOk", "metFlaky", "metBad"])
    with Client(redis_url) as client:
        record = client.submit(_job("first")).result(timeout=30)
    assert record["status"] == "failed" and "metBad" in record["error"]["message"], record

    server = metrics_process(metrics_dir)
    found = counted(server, "failed", 5)
    # every attempt that ended, by activity and outcome; the flaky call's first attempt was retried
    assert value(found, "agentq_calls_total", activity="metOk", status="done") == 2
    assert value(found, "agentq_calls_total", activity="metFlaky", status="retry") == 1
    assert value(found, "agentq_calls_total", activity="metFlaky", status="done") == 1
    assert value(found, "agentq_calls_total", activity="metBad", status="failed") == 1
    # one duration sample per attempt; the 0.3 s call is above the 0.25 s bucket
    assert value(found, "agentq_call_duration_seconds_count", activity="metOk") == 2
    assert value(found, "agentq_call_duration_seconds_bucket", activity="metOk", le="+Inf") == 2
    assert value(found, "agentq_call_duration_seconds_bucket", activity="metOk", le="0.25") <= 1
    assert value(found, "agentq_call_duration_seconds_sum", activity="metOk") >= 0.3
    assert value(found, "agentq_call_duration_seconds_count", activity="metFlaky") == 2
    # the fleet, read from Redis and the broker at the scrape
    assert value(found, "agentq_jobs_total", status="failed") == 1
    assert value(found, "agentq_jobs_total", status="succeeded") == 0
    assert value(found, "agentq_jobs_active") == 0
    assert value(found, "agentq_approvals_pending") == 0
    assert value(found, "agentq_workers_live", activity="metOk") == 1
    assert value(found, "agentq_queue_depth", queue="agentq.activity.metOk") == 0
    assert value(found, "agentq_store_up") == 1 and value(found, "agentq_broker_up") == 1
    assert not any("job_" in str(labels) or "call_" in str(labels) for _, labels in found)  # no ids as labels

    # the calls ran in the prefork pool's children, each writing its own file in this host's folder
    (host,) = [p for p in metrics_dir.iterdir() if p.is_dir()]
    writers = {int(p.stem.rsplit("_", 1)[1]) for p in host.glob("counter_*.db") if p.stem[-1].isdigit()}
    assert writers and worker.pid not in writers, (worker.pid, writers)

    with pytest.raises(urllib.error.HTTPError) as refused:
        server.scrape(token=None)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as wrong:
        server.scrape(token="not-the-token")
    assert wrong.value.code == 401

    # a restarted worker folds the files of the processes that are gone into archives: the totals stay
    worker.stop()
    again = worker_procs.start(["procA"], pool="prefork", concurrency=2, args=["-m", METRICS_MODULE],
                               AGENTQ_METRICS_DIR=str(metrics_dir))
    worker_procs.wait_live(again, ["metOk"])
    assert not [p for p in host.glob("*.db") if p.stem.rsplit("_", 1)[1] in {str(w) for w in writers}]
    assert (host / "counter_archive.db").exists() and (host / "histogram_archive.db").exists()
    after = samples(server.scrape())
    for name, labels in (("agentq_calls_total", {"activity": "metOk", "status": "done"}),
                         ("agentq_calls_total", {"activity": "metFlaky", "status": "retry"}),
                         ("agentq_call_duration_seconds_count", {"activity": "metOk"}),
                         ("agentq_call_duration_seconds_bucket", {"activity": "metOk", "le": "+Inf"})):
        assert value(after, name, **labels) == value(found, name, **labels), (name, labels)

    with Client(redis_url) as client:  # the new worker's counts add to the archived ones
        assert client.submit({"calls": [{"_tool": "metOk", "_outputPath": "†state.x"}]}).result(timeout=30)[
            "status"] == "succeeded"
    final = counted(server, "succeeded", 6)
    assert value(final, "agentq_calls_total", activity="metOk", status="done") == 3
    assert value(final, "agentq_jobs_total", status="succeeded") == 1


@pytest.mark.parametrize("prefetch", ["1", "2"])
def test_a_killed_workers_call_delivered_again_counts_one_redelivery(worker_procs, redis_url, tmp_path,
                                                                     metrics_process, prefetch):
    """A worker killed mid-call: its call's task is delivered again, and that counts once. With a prefetch of one
    a slot (the default) the task was not kept unacknowledged: the other worker's admission sweep sends it again
    once the call's lease is gone, and counts it. With two, the Redis broker restores the unacknowledged task
    (flagged redelivered) after the visibility timeout, and the worker that gets it counts it."""
    metrics_dir = tmp_path / "metrics"
    workers = [worker_procs.start(["procSlow"], AGENTQ_METRICS_DIR=str(metrics_dir),
                                  AGENTQ_PREFETCH_MULTIPLIER=prefetch) for _ in range(2)]
    for proc in workers:
        worker_procs.wait_live(proc, ["procSlow"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit({"calls": [{"_tool": "procSlow", "seconds": 1.5, "tag": "redelivered",
                                           "_outputPath": "†state.slow"}]})
        pid = int(wait_for(lambda: store.redis.lindex("procs:pids:procSlow:redelivered", 0), 15, "procSlow to start"))
        next(p for p in workers if p.pid == pid).kill()
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded"
    server = metrics_process(metrics_dir)
    found = counted(server, "succeeded", 1)
    assert value(found, "agentq_call_redeliveries_total", activity="procSlow") == 1
    assert value(found, "agentq_calls_total", activity="procSlow", status="done") == 1


# ------------------------------------------------------------------------ in-process: the fleet's state


def _ghost_is_known(client: Client) -> None:
    """Make activity `ghost` known but not live: a worker announced it, then went away."""
    store = store_of(client)
    queue = "agentq.activity.ghost"
    announcement = {"id": "gone:1:abc", "hostname": "gone", "pid": 1, "engine": False, "queues": [queue],
                    "activities": [{"name": "ghost", "task": queue, "queue": queue}]}
    RedisFleet(store).announce_worker("gone:1:abc", WorkerAnnouncement.from_dict(announcement), ttl_s=30)
    RedisFleet(store).retire_worker("gone:1:abc")


def test_fleet_gauges_count_active_jobs_pending_approvals_and_waiting_tasks(harness: Harness):
    harness.tools.register("ghost", tool_schema("ghost", params={"n": {"type": "integer"}}))
    client = harness.client(tools=harness.tools)
    _ghost_is_known(client)
    parts = client._parts

    def scrape() -> dict:
        body, content_type = render_metrics(parts)
        assert content_type.startswith("text/plain")
        return samples(body.decode())

    before = scrape()
    assert value(before, "agentq_jobs_active") == 0
    assert value(before, "agentq_workers_live", activity="ghost") == 0
    waiting = client.submit({"calls": [{"_tool": "ghost", "n": 1, "_outputPath": "†state.a"},
                                       {"_tool": "ghost", "n": 2, "_outputPath": "†state.b"}]})
    held = client.submit({"calls": [{"_tool": "ghost", "n": 3, "_outputPath": "†state.c"}],
                          "options": {"approval": ["ghost"]}})
    now = scrape()
    assert value(now, "agentq_jobs_active") == 2
    assert value(now, "agentq_approvals_pending") == 1
    assert value(now, "agentq_queue_depth", queue="agentq.activity.ghost") == 2  # no live worker takes them

    held.cancel()
    waiting.cancel()
    after = scrape()
    assert value(after, "agentq_jobs_active") == 0
    assert value(after, "agentq_approvals_pending") == 0
    assert value(after, "agentq_jobs_total", status="canceled") == 2


def test_a_call_held_after_its_dependency_commits_is_pending_until_approved(harness: Harness):
    """The commit that releases a call needing approval holds it: pending 1; the approval runs it: pending 0."""
    harness.tool("first", output={"type": "object"})
    harness.tool("second", params={"a": {}}, output={"type": "object"})
    harness.activities.register("first", lambda call: {"n": 1})
    harness.activities.register("second", lambda call: {"n": 2})
    harness.worker()
    client = harness.client()
    store = store_of(client)
    handle = client.submit({"calls": [{"_tool": "first", "_outputPath": "†state.a"},
                                      {"_tool": "second", "a": "†state.a", "_outputPath": "†state.b"}],
                            "options": {"approval": ["second"]}})
    second = next(c["id"] for c in handle.calls() if c["tool"] == "second")
    wait_for(lambda: store.call_statuses(handle.id)[second].value == "awaiting_approval", 15, "second to be held")
    # the worker adds the job to the approvals set right after the commit that held the call
    wait_for(lambda: RedisStats(store).fleet_stats().approvals_pending == 1, 15, "the held call to be counted")
    assert RedisStats(store).fleet_stats().jobs_active == 1
    handle.approve(second)
    assert handle.result(timeout=15)["status"] == "succeeded"
    # the end is counted right after the job's own script (a waiter may wake up in between)
    figures = RedisStats(store)
    stats = wait_for(lambda: (found := figures.fleet_stats()).jobs_total and found, 15, "the job's end to be counted")
    assert (stats.approvals_pending, stats.jobs_active, stats.jobs_total) == (0, 0, {"succeeded": 1})
    assert store.redis.zcard(store.fleet.approval_jobs) == 0


def test_a_job_held_again_while_the_approvals_set_is_read_stays_in_it(harness: Harness):
    """Compare-and-delete: a job read as holding nothing is not taken out if a step added it again meanwhile."""
    store = store_of(harness.client())
    key = store.fleet.approval_jobs
    store.redis.zadd(key, {"job_a": 1.0, "job_b": 1.0})
    store.redis.zadd(key, {"job_b": 2.0})  # held again after the read that saw score 1.0
    RedisStats(store)._drop_settled(key, {"job_a": 1.0, "job_b": 1.0})
    assert store.redis.zrange(key, 0, -1) == ["job_b"]


def test_fleet_stats_drop_jobs_that_ended_or_expired_behind_the_set(harness: Harness):
    """The active set is kept outside the jobs' scripts: a job whose end was not taken out of it (its process
    died between the two) or that expired is dropped at the next read."""
    harness.tools.register("ghost", tool_schema("ghost", params={"n": {"type": "integer"}}))
    client = harness.client(tools=harness.tools)
    _ghost_is_known(client)
    store = store_of(client)
    handle = client.submit({"calls": [{"_tool": "ghost", "n": 1, "_outputPath": "†state.a"}]})
    handle.cancel()
    store.redis.zadd(store.fleet.active_jobs, {handle.id: time.time() + 3600, "job_expired": time.time() - 1})
    stats = RedisStats(store).fleet_stats()
    assert stats.jobs_active == 0 and stats.jobs_total == {"canceled": 1}
    assert store.redis.zcard(store.fleet.active_jobs) == 0


def test_the_store_being_down_is_a_gauge_not_an_error(harness: Harness):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    parts = connect(harness.settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"}))
    try:
        found = samples(render_metrics(parts)[0].decode())
    finally:
        parts.close()
    assert value(found, "agentq_store_up") == 0
    assert value(found, "agentq_jobs_active") is None  # nothing made up


# ------------------------------------------------------------------------------------ model requests


def test_model_requests_and_tokens_are_counted_by_model_and_outcome(harness: Harness, anthropic_env: FakeAnthropic,
                                                                     tmp_path: Path):
    harness.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"})
    harness.worker(llm="anthropic")
    client = harness.client()
    model = harness.settings.model
    # this process's own counts (the in-process worker's), without other processes' files on this machine
    parts = connect(harness.settings.model_copy(update={"metrics_dir": tmp_path / "metrics"}), metrics=harness.metrics)
    harness.on_close(parts.close)

    def counts() -> dict:
        return samples(render_metrics(parts)[0].decode())

    before = counts()
    anthropic_env.script(
        Answer.http_error(429, headers={"retry-after": "0.1"}),
        Answer.solution({"calls": [], "output": {"answer": "done"}}),
    )
    record = client.submit({"context": [{"type": "text", "text": "Go"}], "tools": ["weather"],
                            "output": {"type": "object", "properties": {"answer": {"type": "string"}}}}
                           ).result(timeout=30)
    assert record["status"] == "succeeded", record
    after = counts()

    def grew(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert grew("agentq_llm_requests_total", model=model, status="retry") == 1
    assert grew("agentq_llm_requests_total", model=model, status="ok") == 1
    assert grew("agentq_llm_tokens_total", model=model, type="input") == record["usage"]["input_tokens"] > 0
    assert grew("agentq_llm_tokens_total", model=model, type="output") == record["usage"]["output_tokens"] > 0


def test_metrics_dir_default_is_per_user_temp(harness: Harness):
    from agentq.metrics import metrics_dir

    default = harness.settings.model_copy(update={"metrics_dir": None})  # the tests' own folder unset
    assert metrics_dir(default).name.startswith(f"agentq-metrics-{os.getuid()}-")
    custom = harness.settings.model_copy(update={"metrics_dir": Path("/srv/metrics")})
    assert metrics_dir(custom) == Path("/srv/metrics")


# ----------------------------------------------------------------------------------- RabbitMQ queues


RABBITMQ_URL = os.environ.get("AGENTQ_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _rabbitmq_reachable() -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(RABBITMQ_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=2):
            return True
    except OSError:
        return False


def test_queue_depth_on_rabbitmq_by_a_passive_declare(redis_url: str):
    if not _rabbitmq_reachable():
        pytest.skip(f"no RabbitMQ reachable at {RABBITMQ_URL} (set AGENTQ_TEST_RABBITMQ_URL)")
    from kombu import Connection, Exchange, Queue

    from agentq.metrics import queue_depths
    from agentq.runtime.app import create_app
    from agentq.settings import Settings

    name = f"agentq.test.depth.{os.getpid()}.{time.monotonic_ns()}"
    app = create_app(Settings(redis_url=redis_url, broker_url=RABBITMQ_URL))
    # publisher confirms: each publish returns once the queue holds the message, so the depth read next counts it
    with Connection(RABBITMQ_URL, transport_options={"confirm_publish": True}) as connection:
        queue = Queue(name, Exchange(name, type="direct"), routing_key=name, auto_delete=False)
        producer = connection.Producer()
        for n in range(3):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue],
                             serializer="json")
        try:
            # a queue that does not exist closes the AMQP channel: the next queue is still read
            depths = queue_depths(app, [f"{name}.missing", name])
        finally:
            queue(connection.default_channel).delete()
            queue.exchange(connection.default_channel).delete()
            app.close()
    assert depths == {f"{name}.missing": 0, name: 3}
