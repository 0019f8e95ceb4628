"""`agentq healthcheck` (docs/monitoring.md) against real `agentq worker` / `agentq dispatcher` processes: its exit code
and its one line for a live worker, a role that is not live, no announcement from this host, a worker that
stopped beating, and Redis down."""

from __future__ import annotations

import socket

import pytest

from agentq.runtime import health
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.integration.procs import ROOT, base_env, cli, wait_for

pytestmark = pytest.mark.timeout(60)

HOST = socket.gethostname()


def test_a_live_worker_of_this_host_is_healthy(worker_procs, redis_url):
    proc = worker_procs.start(["procA"])
    worker_procs.wait_live(proc, ["procA"])
    for args in ((), ("--role", "worker")):
        done = cli(redis_url, "healthcheck", *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ok: worker ") and f":{proc.pid}:" in done.stdout
        assert len(done.stdout.strip().splitlines()) == 1

    # a worker is not a dispatcher
    done = cli(redis_url, "healthcheck", "--role", "dispatcher")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"agentq healthcheck: no dispatcher of host {HOST} has announced itself "
                                   f"(announcements from: {HOST})")


def test_a_dispatcher_is_healthy_as_a_dispatcher(worker_procs, redis_url, tmp_path):
    import subprocess
    import sys

    log = tmp_path / "dispatcher.log"
    with open(log, "wb") as out:
        dispatcher = subprocess.Popen([sys.executable, "-m", "agentq.cli", "dispatcher", "--pool", "threads",
                                       "--concurrency", "1", "--loglevel", "WARNING"],
                                      env=base_env(redis_url, AGENTQ_METRICS_DIR=str(tmp_path / "metrics")),
                                      cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: cli(redis_url, "healthcheck", "--role", "dispatcher").returncode == 0, 30,
                 "the dispatcher to be healthy", on_timeout=lambda: "\n" + log.read_text())
        done = cli(redis_url, "healthcheck", "--role", "worker")
        assert done.returncode == 1 and "no worker of host" in done.stderr
    finally:
        dispatcher.terminate()
        dispatcher.wait(15)


def test_no_announcement_from_this_host(redis_url):
    done = cli(redis_url, "healthcheck")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == (f"agentq healthcheck: no worker or dispatcher of host {HOST} has announced "
                                   "itself (none from any host)")


def test_a_worker_that_stopped_beating_is_stale(worker_procs, redis_url):
    proc = worker_procs.start(["procA"])
    worker_procs.wait_live(proc, ["procA"])
    proc.kill()  # SIGKILL: no retirement, the announcement stays until it expires (three beats of 1 s)
    store = StateStore(redis_url)
    fleet = RedisFleet(store)
    try:
        verdict = wait_for(lambda: (v := health.check(fleet, heartbeat_s=1.0)).message.startswith("stale") and v,
                           15, "the healthcheck to call the killed worker stale")
    finally:
        store.close()
    assert not verdict.healthy
    done = cli(redis_url, "healthcheck")
    if "stale" in done.stderr:  # the announcement may have expired meanwhile: then it is no announcement at all
        assert f"agentq healthcheck: stale: the last announcement of a worker or dispatcher of host {HOST}" \
               in done.stderr and "more than two heartbeats (2 s)" in done.stderr
    else:
        assert "has announced itself" in done.stderr
    assert done.returncode == 1


def test_redis_down_is_unhealthy_with_the_reason():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = cli(f"redis://127.0.0.1:{port}/0", "healthcheck", "--timeout", "5")
    assert done.returncode == 1
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"agentq healthcheck: Redis unreachable: cannot reach the state store at "
                           f"redis://127.0.0.1:{port}/0")
