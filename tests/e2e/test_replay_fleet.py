"""Replays in a fleet, as a user tries agent jobs without a key: a dispatcher started with
`AGENTQ_LLM=replay:<file>` answers any number of `agentq run`s (one after another and at once), refuses clearly
what its file does not hold, refuses a broken file at start in one line; `agentq api --embedded` runs the page's
agent examples from the packaged replays. Real processes, real Redis, real Celery."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis

from tests.api_server import ApiServer
from tests.e2e.test_api_cli import api_process, wait_healthy  # noqa: F401  (fixture)
from tests.e2e.test_demo_agent import check_record
from tests.integration.procs import ROOT, WorkerProcs, base_env, cli, wait_for

pytestmark = pytest.mark.timeout(180)

REPLAY = "workers/jobs/demo_agent.replay.jsonl"
JOB = "workers/jobs/demo_agent.json"


def replaying_dispatcher(worker_procs: WorkerProcs, *modules: str) -> None:
    """`agentq dispatcher -m workers [-m MODULE...]` replaying the demo's file (it serves the activities too)."""
    extra = [arg for module in modules for arg in ("-m", module)]
    proc = worker_procs.start(module="workers", command="dispatcher", args=extra, AGENTQ_LLM=f"replay:{REPLAY}")
    worker_procs.wait_dispatcher(proc)


def run_json(redis_url: str, job: str) -> dict:
    result = cli(redis_url, "run", job, "--json", timeout=90)
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def test_one_replaying_dispatcher_answers_every_run_of_the_agent_demo_even_at_once(worker_procs, redis_url):
    replaying_dispatcher(worker_procs, "workers.music")  # other tools registered in the fleet: they change nothing
    for _ in range(2):
        record = run_json(redis_url, JOB)
        check_record(record)
        assert record["usage"]["requests"] == 4
    together = [subprocess.Popen([sys.executable, "-m", "agentq.cli", "run", JOB, "--json"], cwd=ROOT,
                                 env=base_env(redis_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(3)]
    for proc in together:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        check_record(json.loads(out))


def test_a_request_the_file_does_not_hold_fails_the_job_with_a_clear_refusal(worker_procs, redis_url, tmp_path):
    replaying_dispatcher(worker_procs)
    job = json.loads((ROOT / JOB).read_text(encoding="utf-8"))
    job["context"][1]["data"]["message"] = "Can the mugs reach Berlin by tomorrow?"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(job))
    record = run_json(redis_url, str(other))
    assert record["status"] == "failed" and record["state"] == {}  # never another request's answers
    error = record["error"]
    assert error["type"] == "ReplayUnmatched"
    assert error["message"].startswith(f"the replay {REPLAY} has no answer for this tick request (key ")
    assert "Can the mugs reach Berlin by tomorrow?" in error["message"]
    check_record(run_json(redis_url, JOB))  # and the dispatcher goes on answering what it holds


def test_a_dispatcher_with_a_broken_replay_file_stops_with_one_line_and_writes_nothing(redis_url, tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"solution": {"calls": [], "output": 1}}) + "\n"
                      + json.dumps({"match": 5, "solution": {}}) + "\n{oops\n")
    result = cli(redis_url, "dispatcher", "-m", "workers", AGENTQ_LLM=f"replay:{broken}", timeout=60)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"agentq: error: the replay file {broken} cannot be used: ")
    assert f"{broken}:2 /match: must be a text or a list of texts" in result.stderr
    assert f"{broken}:3: not valid JSON" in result.stderr
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
    finally:
        client.close()


def wait_ended(api: ApiServer, job_id: str) -> dict:
    def ended() -> dict | None:
        record = api.request("GET", f"/v1/jobs/{job_id}", token=None).json()
        return record if record["status"] in ("succeeded", "failed", "canceled") else None

    return wait_for(ended, 90, f"job {job_id} to end")


def test_the_embedded_api_runs_its_agent_examples_from_the_packaged_replays(api_process):  # noqa: F811
    process, api = api_process("--embedded", "--no-auth", ANTHROPIC_API_KEY="")
    provider = process.line_matching(r"LLM: (.*)").group(1)
    assert provider.startswith("replay of the recorded answers of the example jobs (demo_agent.replay.jsonl, "
                               "producer.replay.jsonl")
    wait_healthy(api)
    examples = api.request("GET", "/v1/examples", token=None).json()
    started = time.monotonic()
    ids = {}
    for name in ("demo_agent", "producer", "demo_agent"):  # the demo twice: answers are never used up
        reply = api.request("POST", "/v1/jobs", json_body=examples[name], token=None)
        assert reply.status in (200, 201, 202), reply.body
        ids[reply.json()["id"]] = name
    for job_id, name in ids.items():
        record = wait_ended(api, job_id)
        assert record["status"] == "succeeded", (name, record["error"])
        if name == "demo_agent":
            check_record(record)
        else:
            assert set(record["state"]) == {"song", "effects", "record"}
    print(f"three example jobs in {time.monotonic() - started:.1f} s")


def test_a_batch_job_under_a_replay_is_answered_as_batched_requests_at_the_batch_price(tmp_path):
    job = json.loads((ROOT / JOB).read_text(encoding="utf-8"))
    job["options"]["priority"] = "batch"
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(job))
    streamed, batched = (json.loads(cli(None, "run", str(p), "-m", "workers", "--json", timeout=90,
                                        AGENTQ_LLM=f"replay:{REPLAY}").stdout) for p in (ROOT / JOB, path))
    check_record(batched)
    assert batched["result"] == streamed["result"]
    assert "batch" not in streamed["usage"]
    assert batched["usage"]["batch"] == {"requests": 4, "cost_usd": pytest.approx(batched["usage"]["cost_usd"])}
    assert batched["usage"]["cost_usd"] == pytest.approx(streamed["usage"]["cost_usd"] / 2)  # the batch discount
