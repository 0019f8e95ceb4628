"""Separate `agentq worker` processes started by the tests: cooperation, late workers, announcements, CLI.

Each worker is `python -m agentq.cli worker -m tests.integration.procs_activities --pool threads ...` on the
session's private Redis (see `procs.py`); the test process imports no activity code: it submits through a
`Client` that knows only what the workers published.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from agentq.client import Client
from agentq.errors import JobValidationError
from agentq.store.fleet import RedisFleet
from tests.integration.conftest import store_of
from tests.integration.procs import TOOLS_DIR, cli, wait_for
from tests.integration.test_job_validation import job_keys

pytestmark = pytest.mark.timeout(60)


def _client(redis_url: str) -> Client:
    return Client(redis_url)


def _runs(store, activity: str, tag: str = "") -> int:
    return int(store.redis.get(f"procs:runs:{activity}:{tag}") or 0)


CHAIN_JOB = {
    "context": [{"type": "state", "data": {"x": 1}}],
    "calls": [
        {"_tool": "procB", "a": "†state.a.value", "_outputPath": "†state.b"},
        {"_tool": "procA", "x": "†state.x", "_outputPath": "†state.a"},
    ],
}


def test_two_processes_serving_different_activities_cooperate_on_one_job(worker_procs, redis_url):
    first = worker_procs.start(["procA"])
    second = worker_procs.start(["procB"])
    worker_procs.wait_live(first, ["procA"])
    worker_procs.wait_live(second, ["procB"])
    live = RedisFleet(worker_procs.store).live_activities()
    assert set(live) == {"procA", "procB"}, live

    with _client(redis_url) as client:  # no tool registry, no activity code: published tools only
        assert set(client.tools()) == set(RedisFleet(worker_procs.store).published_tools())  # nothing of its own
        record = client.submit(CHAIN_JOB).result(timeout=20)

    assert record["status"] == "succeeded", record
    state = record["state"]
    assert state["a"]["value"] == 2 and state["b"]["value"] == 20
    assert state["a"]["pid"] == first.pid and state["b"]["pid"] == second.pid
    assert len({state["a"]["pid"], state["b"]["pid"], os.getpid()}) == 3
    assert _runs(worker_procs.store, "procA") == 1 and _runs(worker_procs.store, "procB") == 1


def test_a_call_whose_activity_has_no_live_worker_waits_then_runs_when_one_starts(worker_procs, redis_url):
    store = worker_procs.store
    assert RedisFleet(store).live_activities() == {}
    late_tool = json.loads((TOOLS_DIR / "lateThing.json").read_text())  # its `_activity` is explicit
    with _client(redis_url) as client:
        handle = client.submit({"tools": [late_tool],
                                "calls": [{"_tool": "lateThing", "note": "hello", "_outputPath": "†state.late"}]})
        (call_id, record), = store.call_records(handle.id).items()
        assert (record.mode, record.activity, record.queue) == (
            "explicit", "lateThing", "agentq.activity.lateThing")
        assert store.redis.llen("agentq.activity.lateThing") == 1  # the task waits in the broker
        waited_until = time.monotonic() + 1.5
        while time.monotonic() < waited_until:
            assert handle.status() == "queued"
            assert store.call_statuses(handle.id) == {call_id: "ready"}
            time.sleep(0.1)

        proc = worker_procs.start(["lateThing"])
        record = handle.result(timeout=20)
    assert record["status"] == "succeeded", record
    assert record["state"]["late"] == {"pid": proc.pid, "note": "hello"}
    assert _runs(worker_procs.store, "lateThing") == 1


def test_announcements_list_activities_with_options_and_expire_when_the_process_dies(worker_procs, redis_url):
    proc = worker_procs.start(["procA", "procEcho"])
    announcement = worker_procs.wait_live(proc, ["procA", "procEcho"])
    store = worker_procs.store
    assert announcement["hostname"] and announcement["pid"] == proc.pid
    assert (announcement["concurrency"], announcement["processes"]) == (2, 1)  # two threads of one process
    assert {"agentq.activity.procA", "procs.echo", "agentq.activity.procEcho"} <= set(announcement["queues"])
    live = RedisFleet(store).live_activities()
    assert set(live) == {"procA", "procEcho"}
    assert live["procEcho"] == {
        "name": "procEcho", "activity": "procEcho", "version": "1",
        "task": "agentq.activity.procEcho", "queue": "procs.echo", "retries": 2,
        "retry_backoff": 0.5, "timeout": None, "rate_limit": "50/s", "is_async": False, "idempotent": False,
        "workers": [announcement["id"]]}
    assert live["procA"]["queue"] == "agentq.activity.procA" and live["procA"]["retries"] == 0

    # calls are routed to the queue the live worker announced
    with _client(redis_url) as client:
        handle = client.submit({"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}]})
        assert [r.queue for r in store_of(client).call_records(handle.id).values()] == ["procs.echo"]
        assert handle.result(timeout=20)["state"]["echo"] == {"pid": proc.pid, "text": "hi"}

    proc.kill()  # no goodbye: the announcement must expire on its own (3 heartbeats of 1 s)
    left_ms = store.redis.pttl(store.fleet.worker(announcement["id"]))  # what its last beat left (-2: gone)
    assert left_ms == -2 or 0 < left_ms <= 3000, left_ms
    wait_for(lambda: RedisFleet(store).live_activities() == {}, 8, "the dead worker's announcement to expire")
    assert RedisFleet(store).live_workers() == []


def test_published_tools_let_a_client_without_tool_code_validate_jobs(worker_procs, redis_url):
    proc = worker_procs.start(["procA"])
    worker_procs.wait_live(proc, ["procA"])
    store = worker_procs.store
    published = RedisFleet(store).published_tools()
    assert {"procA", "procB", "procSlow", "procEcho", "lateThing"} <= set(published)
    assert published["procA"] == json.loads((TOOLS_DIR / "procA.json").read_text())

    with _client(redis_url) as client:
        assert set(client.tools()) == set(RedisFleet(worker_procs.store).published_tools())  # nothing of its own
        with pytest.raises(JobValidationError) as caught:
            client.submit({"calls": [{"_tool": "procA", "x": "one", "_outputPath": "†state.a"},
                                     {"_tool": "procZ", "_outputPath": "†state.z"}]})
        pointers = {p.pointer for p in caught.value.problems}
        assert {"/calls/0/x", "/calls/1/_tool"} <= pointers, caught.value
        assert store.recent_jobs() == [] and job_keys(client) == []  # nothing written
        record = client.submit({"calls": [{"_tool": "procA", "x": 41, "_outputPath": "†state.a"}]}).result(timeout=20)
    assert record["state"] == {"a": {"pid": proc.pid, "value": 42}}, record


def test_two_processes_publishing_different_schemas_for_one_tool_are_reported(worker_procs, redis_url, tmp_path):
    first = worker_procs.start(["procA"])
    worker_procs.wait_live(first, ["procA"])
    other = json.loads((TOOLS_DIR / "procA.json").read_text())
    other["description"] = "A different procA published by another process."
    other_dir = tmp_path / "other-tools"
    other_dir.mkdir()
    (other_dir / "procA.json").write_text(json.dumps(other))
    second = worker_procs.start(["procB"], args=["--tools", str(other_dir)])
    second_announcement = worker_procs.wait_live(second, ["procB"])

    conflicts = RedisFleet(worker_procs.store).tool_conflicts()
    assert set(conflicts) == {"procA"}, conflicts
    assert conflicts["procA"]["publisher"] == second_announcement["id"]
    assert conflicts["procA"]["schema"] == other
    assert "different schema" in second.output()  # the second worker warned in its log too

    shown = cli(redis_url, "tools")
    assert shown.returncode == 0, shown.stderr
    warnings = [line for line in shown.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and "'procA'" in warnings[0] and second_announcement["id"] in warnings[0], warnings
    schema = json.loads(shown.stdout)
    assert "procA" in {t["properties"]["_tool"]["const"] for t in schema["properties"]["calls"]["items"]["anyOf"]}


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_submits_to_and_follows_a_running_worker_process(worker_procs, redis_url, tmp_path):
    proc = worker_procs.start()  # every activity of procs_activities
    worker_procs.wait_live(proc, ["procA", "procB"])
    job_file = tmp_path / "chain.json"
    job_file.write_text(json.dumps(CHAIN_JOB))

    submitted = cli(redis_url, "submit", str(job_file))
    assert submitted.returncode == 0 and submitted.stderr == "", submitted
    job_id = submitted.stdout.strip()
    assert job_id.startswith("job_") and submitted.stdout == job_id + "\n"

    status = cli(redis_url, "status", job_id)
    assert status.returncode == 0 and status.stdout.strip() in ("queued", "running", "succeeded"), status

    result = cli(redis_url, "result", job_id, "--wait", "--timeout", "20")
    assert result.returncode == 0, result
    record = json.loads(result.stdout)
    assert set(record) == {"id", "status", "tenant", "result", "state", "instances", "error", "usage",
                           "created_at", "finished_at"}
    assert (record["id"], record["status"]) == (job_id, "succeeded")
    assert record["state"]["a"]["pid"] == record["state"]["b"]["pid"] == proc.pid
    assert cli(redis_url, "status", job_id).stdout == "succeeded\n"


def test_cli_events_of_a_job_a_worker_process_ran(worker_procs, redis_url):
    """`events` of a finished job, with `--follow` (which ends with the job), and resumed `--after` an event."""
    proc = worker_procs.start()
    worker_procs.wait_live(proc, ["procA", "procB"])
    with _client(redis_url) as client:
        handle = client.submit(CHAIN_JOB)
        assert handle.result(timeout=20)["status"] == "succeeded"
    job_id = handle.id

    for args in ([], ["--follow"]):
        events = cli(redis_url, "events", job_id, *args)
        assert events.returncode == 0, events
        lines = [json.loads(line) for line in events.stdout.splitlines()]
        assert lines[0]["event"] == "job.queued" and lines[-1]["event"] == "job.finished"
        assert all(e["id"] and e["job_id"] == job_id for e in lines)
        assert sum(e["event"] == "call.finished" for e in lines) == 2
        assert not any((e.get("part") or {}).get("technical_details") for e in lines)  # stripped
    resumed = cli(redis_url, "events", job_id, "--after", lines[-2]["id"])
    assert [json.loads(line)["event"] for line in resumed.stdout.splitlines()] == ["job.finished"]


def test_cli_run_with_a_redis_url_submits_to_the_running_worker_process(worker_procs, redis_url, tmp_path):
    """With AGENTQ_REDIS_URL set, `run` submits to the running worker (not to an embedded one)."""
    proc = worker_procs.start()
    worker_procs.wait_live(proc, ["procA", "procB"])
    job_file = tmp_path / "chain.json"
    job_file.write_text(json.dumps(CHAIN_JOB))

    ran = cli(redis_url, "run", str(job_file), "--json")
    assert ran.returncode == 0, ran
    record = json.loads(ran.stdout)
    assert record["status"] == "succeeded" and record["id"].startswith("job_")
    assert record["state"]["a"]["pid"] == record["state"]["b"]["pid"] == proc.pid
    live = cli(redis_url, "run", str(job_file))
    assert live.returncode == 0, live
    assert "procA" in live.stdout and "procB" in live.stdout and "succeeded" in live.stdout, live.stdout
    assert _runs(worker_procs.store, "procA") == 2


@pytest.mark.parametrize("args", [("status", "job_missing"), ("result", "job_missing"), ("run", "nonexistent.json")])
def test_cli_errors_are_one_line_on_stderr_and_a_nonzero_exit(redis_url, args):
    done = cli(redis_url, *args)
    assert done.returncode != 0 and done.stdout == "", done
    assert done.stderr.startswith("agentq: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert args[1] in done.stderr


def test_a_second_worker_with_the_same_node_name_on_one_host_is_refused_with_how_to_name_it(worker_procs):
    first = worker_procs.start(["procA"], args=["--hostname", "twin@%h"])
    worker_procs.wait_live(first, ["procA"])
    second = worker_procs.start(["procA"], args=["--hostname", "twin@%h"])
    assert second.popen.wait(30) != 0
    import socket

    assert f"a worker named twin@{socket.gethostname()} runs on this host already" in second.output()
    assert "--hostname twin-2@%h" in second.output() and "Traceback" not in second.output()
    assert first.alive()
