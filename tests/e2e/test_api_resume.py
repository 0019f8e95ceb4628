"""`POST /v1/jobs/{id}/resume` over real HTTP (docs/resume.md) and `agentq resume` as a subprocess: real uvicorn, real
Redis, real in-process Celery workers. A canceled job resumes and its SSE stream goes on to the new end; a succeeded
or running job is 409, an expired one 410, bad options 422 with their pointers, another tenant's job 404 and a read
token 403, and nothing is written by any of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.api_server import ApiServer
from tests.e2e.conftest import Gate
from tests.integration.conftest import Harness
from tests.integration.procs import wait_for

pytestmark = pytest.mark.timeout(120)

ACME, GLOBEX, ACME_READ = "acme-token-0123456789", "globex-token-0123456789", "acme-read-token-0123456789"


@pytest.fixture
def tokens_file(tmp_path: Path) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ACME: {"tenant": "acme", "role": "submit"}, GLOBEX: {"tenant": "globex"},
                                ACME_READ: {"tenant": "acme", "role": "read"}}))
    return f"@{path}"


GATED = {"calls": [
    {"_tool": "echo", "text": "first", "_outputPath": "†state.first"},
    {"_tool": "gate", "text": "†state.first.said", "_outputPath": "†state.gate"},
    {"_tool": "echo", "text": "†state.gate.passed", "_outputPath": "†state.last"},
]}


def events_of(api: ApiServer, job_id: str, token: str) -> list[str]:
    """The job's events over SSE, until the stream ends (after the job's last `job.finished`)."""
    return [m.event for m in api.sse(f"/v1/jobs/{job_id}/events", token=token) if m.event is not None]


def finished(api: ApiServer, job_id: str) -> dict:
    events_of(api, job_id, ACME)
    return api.request("GET", f"/v1/jobs/{job_id}", token=ACME).json()


def test_a_canceled_job_resumes_over_http_and_its_stream_goes_on_to_the_new_end(
        harness: Harness, echo: Gate, serve_api, tokens_file: str):
    api = serve_api(tokens=[tokens_file])
    job = api.request("POST", "/v1/jobs", json_body=GATED, token=ACME).json()
    assert echo.entered.wait(20)
    assert api.request("POST", f"/v1/jobs/{job['id']}/cancel", token=ACME).json()["status"] == "canceled"

    # refused: another tenant's job is not found, a read token may not write, bad options name their pointers
    assert api.request("POST", f"/v1/jobs/{job['id']}/resume", token=GLOBEX).status == 404
    assert api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME_READ).status == 403
    bad = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME,
                      json_body={"options": {"max_ticks": 0, "concurrency": {"key": "x"}, "deadline_s": "soon"}})
    assert bad.status == 422, bad.body
    assert sorted(p["pointer"] for p in bad.json()["error"]["problems"]) == [
        "/options/concurrency", "/options/deadline_s", "/options/max_ticks"]
    unknown = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME, json_body={"option": {}})
    assert unknown.status == 422 and unknown.json()["error"]["problems"][0]["pointer"] == "/option"
    assert api.request("GET", f"/v1/jobs/{job['id']}", token=ACME).json()["status"] == "canceled"
    assert "job.resumed" not in events_of(api, job["id"], ACME)  # nothing was written by the refusals

    resumed = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME)
    assert resumed.status == 200, resumed.body
    assert resumed.json()["status"] == "running"
    assert [run["status"] for run in resumed.json()["runs"]] == ["canceled", "running"]
    again = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME)
    assert again.status == 409 and "only a failed or canceled job" in again.json()["error"]["message"]
    echo.opened.set()  # the call running at the cancel ends now, in the resumed run, and releases the last one
    record = finished(api, job["id"])
    assert record["status"] == "succeeded", record
    assert record["state"]["last"] == {"said": "first"}
    names = events_of(api, job["id"], ACME)  # one stream, from the start to the new end
    assert names.count("job.finished") == 2 and names[-1] == "job.finished"
    assert names.index("job.resumed") > names.index("job.finished")
    done = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME)
    assert done.status == 409 and "succeeded" in done.json()["error"]["message"]


def test_an_expired_job_cannot_be_resumed_410(harness: Harness, echo: Gate, serve_api, tokens_file: str):
    api = serve_api(tokens=[tokens_file])
    job = api.request("POST", "/v1/jobs", json_body={"calls": [{"_tool": "boom", "_outputPath": "†state.x"}],
                                                      "options": {"ttl_s": 1}}, token=ACME).json()
    wait_for(lambda: api.request("GET", f"/v1/jobs/{job['id']}", token=ACME).status == 404, 10,
             "the job's data to expire")
    gone = api.request("POST", f"/v1/jobs/{job['id']}/resume", token=ACME)
    assert gone.status == 410, gone.body
    assert gone.json()["error"]["type"] == "JobExpired"
    assert api.request("POST", "/v1/jobs/job_never_submitted/resume", token=ACME).status == 404


def test_agentq_resume_follows_the_resumed_run_and_status_lists_the_runs(harness: Harness, echo: Gate,
                                                                        tmp_path: Path):
    client = harness.client()
    handle = client.submit(GATED)
    assert echo.entered.wait(20)
    assert handle.cancel() == "canceled"
    env = {**os.environ, "AGENTQ_REDIS_URL": harness.settings.redis_url}
    bad = subprocess.run([sys.executable, "-m", "agentq.cli", "resume", handle.id, "--budget", "{oops"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and bad.stderr.startswith("agentq: error: --budget is not JSON"), bad.stderr
    refused = subprocess.run([sys.executable, "-m", "agentq.cli", "resume", handle.id, "--max-ticks", "0"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 1 and "/options/max_ticks" in refused.stderr, refused.stderr
    echo.opened.set()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agentq.cli", "resume", handle.id, "--follow"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job {handle.id} resumed (run 2)" in done.stdout
    assert f"job {handle.id} succeeded" in done.stdout
    assert time.monotonic() - started < 30
    status = subprocess.run([sys.executable, "-m", "agentq.cli", "status", handle.id], capture_output=True,
                            text=True, env=env, timeout=60)
    lines = status.stdout.splitlines()
    assert lines[0] == "succeeded" and lines[1].startswith("run 1: canceled") and lines[2].startswith(
        "run 2: succeeded"), status.stdout
