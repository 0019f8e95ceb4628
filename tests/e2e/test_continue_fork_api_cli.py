"""Continue and fork over real HTTP and from the `agentq` command (docs/continue-and-fork.md): real uvicorn, real
Redis, a real in-process Celery worker, the real `anthropic` SDK against the fake Messages API; the CLI runs as a
separate process."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.api_server import ApiServer
from tests.e2e.test_api import finished
from tests.e2e.test_cli_approvals import agentq, one_error_line
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest

pytestmark = pytest.mark.timeout(120)

ADMIN, ACME, GLOBEX, ACME_READ = ("admin-token-0123456789", "acme-token-0123456789", "globex-token-0123456789",
                                  "acme-read-token-0123456789")


def answers(*outputs: str):
    lock, pending = threading.Lock(), [Answer.solution({"calls": [], "output": text}) for text in outputs]

    def answer(request: RecordedRequest) -> Answer:
        with lock:
            return pending.pop(0)

    return answer


@pytest.fixture
def api(harness, anthropic_env: FakeAnthropic, serve_api, tmp_path: Path) -> ApiServer:
    harness.tool("note", params={"text": {"type": "string"}}, output={})
    harness.activities.register("note")(lambda call: "noted")
    harness.worker(llm="anthropic", concurrency=2)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"},
                                  GLOBEX: {"tenant": "globex"}, ACME_READ: {"tenant": "acme", "role": "read"}}))
    return serve_api(tokens=[f"@{tokens}"])


def count(api: ApiServer) -> int:
    return len(api.request("GET", "/v1/jobs?limit=500", token=ADMIN).json())


def test_continue_fork_and_threads_over_http_for_a_tenant(api: ApiServer, anthropic_env: FakeAnthropic):
    anthropic_env.responder = answers("Hello", "Fine, thanks", "Hi again")
    created = api.request("POST", "/v1/jobs", token=ACME, json_body={
        "context": [{"type": "text", "text": "Say hello."}], "tools": ["note"]}).json()
    assert finished(api, created["id"])["result"] == "Hello"

    cont = api.request("POST", f"/v1/jobs/{created['id']}/continue", token=ACME,
                       json_body={"context": [{"type": "text", "text": "How are you?"}], "options": {"max_ticks": 3}})
    assert cont.status == 201, cont.body
    record = cont.json()
    assert cont.headers["location"] == f"/v1/jobs/{record['id']}"
    assert (record["continued_from"], record["thread"], record["tenant"]) == (created["id"], created["id"], "acme")
    assert finished(api, record["id"])["result"] == "Fine, thanks"
    thread = api.request("GET", f"/v1/threads/{created['id']}", token=ACME).json()
    assert [j["id"] for j in thread["jobs"]] == [created["id"], record["id"]]
    assert [j["record"]["result"] for j in thread["jobs"]] == ["Hello", "Fine, thanks"]

    before = count(api)
    # another tenant: the job and the thread do not exist for it; a read token may not write
    for path, body in (("continue", {"context": [{"type": "text", "text": "x"}]}), ("fork", {"at_tick": 0})):
        other = api.request("POST", f"/v1/jobs/{created['id']}/{path}", token=GLOBEX, json_body=body)
        assert other.status == 404 and other.json()["error"]["type"] == "JobNotFound", other.body
        assert api.request("POST", f"/v1/jobs/{created['id']}/{path}", token=ACME_READ, json_body=body).status == 403
    assert api.request("GET", f"/v1/threads/{created['id']}", token=GLOBEX).status == 404
    assert api.request("GET", f"/v1/jobs/{created['id']}/forks", token=GLOBEX).status == 404
    # a bad request: 422 naming every problem by its pointer
    bad = api.request("POST", f"/v1/jobs/{created['id']}/fork", token=ACME,
                      json_body={"at_tick": 7, "options": {"model": 5}, "extra": True})
    assert bad.status == 422, bad.body
    assert {p["pointer"] for p in bad.json()["error"]["problems"]} >= {"/at_tick", "/options/model", "/extra"}
    assert api.request("POST", f"/v1/jobs/{created['id']}/continue", token=ACME, json_body={}).status == 422
    assert count(api) == before  # nothing written

    fork = api.request("POST", f"/v1/jobs/{created['id']}/fork", token=ACME, json_body={"at_tick": 0})
    assert fork.status == 201 and fork.json()["forked_from"] == created["id"], fork.body
    assert finished(api, fork.json()["id"])["result"] == "Hi again"
    forks = api.request("GET", f"/v1/jobs/{created['id']}/forks", token=ACME).json()
    assert [f["id"] for f in forks["forks"]] == [fork.json()["id"]]


def test_the_cli_continues_follows_lists_a_thread_and_refuses_a_fork_past_the_last_tick(
        harness, api: ApiServer, anthropic_env: FakeAnthropic):
    redis_url = harness.settings.redis_url
    anthropic_env.responder = answers("One", "Two")
    created = api.request("POST", "/v1/jobs", token=ADMIN, json_body={
        "context": [{"type": "text", "text": "Count."}], "tools": ["note"]}).json()
    finished(api, created["id"])

    run = agentq("continue", created["id"], "--message", "Go on", "--follow", redis_url=redis_url)
    assert run.returncode == 0, run.stderr
    new_id = run.stdout.splitlines()[0]
    assert api.request("GET", f"/v1/jobs/{new_id}", token=ADMIN).json()["result"] == "Two"

    listed = agentq("thread", created["id"], "--json", redis_url=redis_url)
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [created["id"], new_id]
    table = agentq("thread", created["id"], redis_url=redis_url)
    assert new_id in table.stdout and "Go on" in table.stdout

    line = one_error_line(agentq("fork", created["id"], "--at", "3", redis_url=redis_url))
    assert "/at_tick" in line and "past the job's last tick" in line
    line = one_error_line(agentq("continue", "job_never_submitted", "--message", "x", redis_url=redis_url))
    assert "job_never_submitted" in line
