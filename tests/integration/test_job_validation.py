"""Job submission validates the whole job before anything is written (docs/protocol.md#calls,
docs/protocol.md#references, docs/protocol.md#scopes, docs/protocol.md#jobs).

Every rejected job is submitted through `Client.submit` against the private Redis; each test asserts the
`JobValidationError`, that its `problems` point at every problem, and that no key of any job was written.
Tools reach the client the way they reach any submitter: published in the store by another process.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from agentq.client import Client
from agentq.errors import ConfigurationError, JobValidationError
from agentq.runtime.worker import InProcessWorker
from agentq.store.fleet import RedisFleet
from agentq.store.keys import JobKeys
from tests.integration.conftest import store_of, tool_schema

TOOLS = {
    "order": tool_schema("order", params={"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                         required=["sku", "qty"], _scopes={"type": "array", "items": {"enum": ["state", "input"]}}),
    "ship": tool_schema("ship", params={"to": {"type": "string"}, "options": {"type": "object"}}),
}


@pytest.fixture
def client(harness) -> Client:
    """A submitter that knows the tools only because another process published them."""
    client = harness.client()
    RedisFleet(store_of(client)).publish_tools(TOOLS, publisher="tests")
    return client


def sender(harness):
    """A Celery app of another service, which only knows agentq's task name and queue (README)."""
    from celery import Celery

    app = Celery("billing", broker=harness.settings.redis_url, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_default_queue="agentq.engine")
    harness.on_close(app.close)
    return app


#: Hash tags of fleet-wide keys (admission, rollouts, the batch lane): housekeeping of the fleet, not a job's.
FLEET_TAGS = ("{admission}", "{rollouts}", "{batch}", "{timers}", "{schedules}", "{waits:")  # fleet-wide, not a job's


def job_keys(client: Client) -> list[str]:
    """Every key of a job (`<namespace>:{<job id>}:...`), whatever its id."""
    namespace = client.settings.namespace
    keys = store_of(client).redis.scan_iter(match=f"{namespace}:{{*")
    return sorted(k for k in keys if not k.startswith(tuple(f"{namespace}:{tag}" for tag in FLEET_TAGS)))


def assert_nothing_written(client: Client) -> None:
    assert job_keys(client) == []
    assert store_of(client).redis.zcard(store_of(client).fleet.jobs) == 0
    assert store_of(client).recent_jobs() == []


def rejected(client: Client, job) -> dict[str, str]:
    """Submit `job`, expect a JobValidationError, check nothing was written; return {pointer: message}."""
    with pytest.raises(JobValidationError) as caught:
        client.submit(job)
    assert_nothing_written(client)
    problems = caught.value.problems
    assert problems, caught.value
    for problem in problems:  # the error's text names every problem too
        assert problem.message in str(caught.value)
    pointers = [p.pointer for p in problems]
    assert len(pointers) == len(set(pointers)), problems
    return {p.pointer: p.message for p in problems}


def ship(**params) -> dict:
    return {"_tool": "ship", "to": "Paris", **params}


# ------------------------------------------------------------------------------------------ the document


def test_malformed_json_text(client):
    text = '{"calls": [{"_tool": "ship", "to": "Paris",}]'
    problems = rejected(client, text)
    assert list(problems) == [""]
    assert "column" in problems[""]  # where the text breaks
    with pytest.raises(JobValidationError, match="not valid JSON"):
        client.submit(text)


def test_json_text_that_is_not_an_object(client):
    problems = rejected(client, "[1, 2]")
    assert list(problems) == [""]
    assert "list" in problems[""]


def test_unknown_top_level_field(client):
    problems = rejected(client, {"calls": [ship()], "callz": [], "priority": 3})
    assert set(problems) == {"/callz", "/priority"}
    assert "unknown field" in problems["/callz"] and "calls" in problems["/callz"]


def test_valid_json_text_is_accepted_and_the_same_job_as_a_dict(harness, client):
    """The control case: the same client and tools accept a good job given as JSON text."""
    harness.activities.register("ship", lambda call: f"shipped to {call['to']}")
    harness.tools.register("ship", TOOLS["ship"])
    _start_worker(harness)
    record = client.submit(json.dumps({"calls": [ship(_outputPath="†state.shipping")]})).result(timeout=10)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"shipping": "shipped to Paris"}


# ----------------------------------------------------------------------------------------------- tools


def test_unknown_tool_in_tools(client):
    problems = rejected(client, {"tools": ["ship", "teleport"], "calls": [ship()]})
    assert list(problems) == ["/tools/1"]
    assert "teleport" in problems["/tools/1"] and "ship" in problems["/tools/1"]  # names the known tools


def test_unknown_tool_in_a_call(client):
    problems = rejected(client, {"calls": [ship(), {"_tool": "teleport", "to": "Mars"}]})
    assert list(problems) == ["/calls/1/_tool"]
    assert "teleport" in problems["/calls/1/_tool"]


def test_call_to_a_tool_left_out_of_the_jobs_tools(client):
    problems = rejected(client, {"tools": ["ship"], "calls": [{"_tool": "order", "sku": "A", "qty": 1}]})
    assert list(problems) == ["/calls/0/_tool"]
    assert "order" in problems["/calls/0/_tool"]


def test_invalid_inline_tool(client):
    inline = {"type": "object", "description": "no output", "properties": {"_tool": {"const": "bare"}}}
    problems = rejected(client, {"tools": ["ship", inline], "calls": [ship()]})
    assert list(problems) == ["/tools/1"]
    assert "bare" in problems["/tools/1"] and "_output" in problems["/tools/1"]


# ----------------------------------------------------------------------------------------------- calls


def test_calls_that_violate_their_schema(client):
    problems = rejected(client, {"calls": [
        {"_tool": "order", "sku": "A", "qty": "two"},
        {"_tool": "order", "sku": "B"},
        {"_tool": "order", "sku": 7, "qty": 0},
        ship(options=["not", "an", "object"]),
    ]})
    assert set(problems) == {"/calls/0/qty", "/calls/1", "/calls/2/sku", "/calls/2/qty", "/calls/3/options"}
    assert "integer" in problems["/calls/0/qty"]
    assert problems["/calls/1"] == "missing required property 'qty'"  # points at the call, names the property
    assert "string" in problems["/calls/2/sku"] and "minimum" in problems["/calls/2/qty"]
    assert "object" in problems["/calls/3/options"]


def test_a_call_that_is_not_an_object(client):
    problems = rejected(client, {"calls": [ship(), "ship to Paris"]})
    assert list(problems) == ["/calls/1"]


@pytest.mark.parametrize("reference", ["†", "†state.", "†state..a", "†state.a ||", "†state.a && ", "† state.a"])
def test_malformed_reference(client, reference):
    problems = rejected(client, {"context": [{"type": "state", "data": {"a": "x"}}],
                                 "calls": [ship(to=reference)]})
    assert list(problems) == ["/calls/0/to"]
    assert "malformed reference" in problems["/calls/0/to"]
    assert reference.strip() in problems["/calls/0/to"]


def test_malformed_reference_inside_nested_parameters(client):
    problems = rejected(client, {"context": [{"type": "state", "data": {"a": "x"}}],
                                 "calls": [ship(options={"legs": ["†state.a", {"via": "†state..a"}]})]})
    assert list(problems) == ["/calls/0/options/legs/1/via"]


def test_malformed_output_path(client):
    problems = rejected(client, {"calls": [ship(_outputPath="state.shipping"), ship(_outputPath="†state.a ||"),
                                           ship(_outputPath=42)]})
    assert set(problems) == {"/calls/0/_outputPath", "/calls/1/_outputPath", "/calls/2/_outputPath"}


def test_unknown_output_method(client):
    problems = rejected(client, {"calls": [ship(_outputPath="†state.s", _outputMethod="upsert")]})
    assert list(problems) == ["/calls/0/_outputMethod"]
    assert "upsert" in problems["/calls/0/_outputMethod"] and "push" in problems["/calls/0/_outputMethod"]


def test_scopes_outside_the_tools_enum(client):
    problems = rejected(client, {"calls": [
        {"_tool": "order", "sku": "A", "qty": 1, "_scopes": ["state", "secrets"]},
        ship(_scopes=["state"]),
    ]})
    assert set(problems) == {"/calls/0/_scopes/1", "/calls/1/_scopes"}
    assert "secrets" in problems["/calls/0/_scopes/1"] and "input" in problems["/calls/0/_scopes/1"]
    assert "ship" in problems["/calls/1/_scopes"]


def test_bad_instance(client):
    problems = rejected(client, {"calls": [ship(_instance=""), ship(_instance=3)]})
    assert set(problems) == {"/calls/0/_instance", "/calls/1/_instance"}


# ------------------------------------------------------------------------------------------ references


def test_reference_nothing_can_write(client):
    problems = rejected(client, {
        "context": [{"type": "state", "data": {"city": "Paris"}}],
        "calls": [ship(to="†state.address", _outputPath="†state.shipping"),
                  ship(to="†state.city || †input.city"),  # satisfiable: the first alternative exists
                  ship(to="†state.city && †state.zip")]})
    assert set(problems) == {"/calls/0/to", "/calls/2/to"}
    assert "†state.address" in problems["/calls/0/to"]
    assert "†state.zip" in problems["/calls/2/to"] and "†state.city" not in problems["/calls/2/to"].split(":")[-1]


def test_reference_to_another_instances_write_is_unsatisfiable(client):
    problems = rejected(client, {"calls": [
        ship(_instance="A", _outputPath="†state.where"),
        ship(_instance="B", to="†state.where"),
    ]})
    assert list(problems) == ["/calls/1/to"]
    assert "'B'" in problems["/calls/1/to"]


def test_reference_cycle_between_two_calls(client):
    problems = rejected(client, {"calls": [
        ship(to="†state.b", _outputPath="†state.a"),
        ship(to="†state.a.x", _outputPath="†state.b"),
        ship(_outputPath="†state.c"),
    ]})
    assert list(problems) == ["/calls/0"]
    message = problems["/calls/0"]
    assert "cycle" in message and "/calls/0" in message and "/calls/1" in message and "/calls/2" not in message


# ------------------------------------------------------------------------------------ limits and options


def test_oversized_job(harness):
    settings = harness.settings.model_copy(update={"max_job_bytes": 300})
    with Client(settings=settings) as small:
        RedisFleet(store_of(small)).publish_tools(TOOLS, publisher="tests")
        job = {"context": [{"type": "state", "data": {"blob": "x" * 400}}], "calls": [ship()]}
        problems = rejected(small, job)
        assert list(problems) == [""]
        assert "the limit is 300" in problems[""]
        problems = rejected(small, json.dumps(job))  # JSON text is measured as given
        assert list(problems) == [""]
        # a job under the limit passes the same client
        handle = small.submit({"calls": [ship()]})
        assert handle.status() in ("queued", "running", "succeeded")


def test_too_many_calls(harness):
    settings = harness.settings.model_copy(update={"max_calls": 2})
    with Client(settings=settings) as small:
        RedisFleet(store_of(small)).publish_tools(TOOLS, publisher="tests")
        problems = rejected(small, {"calls": [ship(), ship(), ship()]})
        assert list(problems) == ["/calls"]
        assert "3 calls" in problems["/calls"] and "limit is 2" in problems["/calls"]


def test_bad_options(client):
    problems = rejected(client, {"calls": [ship()], "options": {"locale": "xx", "max_ticks": 0, "colour": "red"}})
    assert set(problems) == {"/options/locale", "/options/max_ticks", "/options/colour"}
    assert "'xx'" in problems["/options/locale"] and "en" in problems["/options/locale"]


def test_a_bad_budget_or_cache_ttl_is_rejected_with_its_pointers_and_nothing_written(client):
    problems = rejected(client, {"calls": [ship()], "options": {
        "budget": {"max_cost_usd": -1, "max_requests": 2.5, "max_hours": 1}, "cache_ttl": "2h"}})
    assert problems == {
        "/options/budget/max_cost_usd": "expected a number of US dollars >= 0, got -1",
        "/options/budget/max_requests": "expected an integer >= 0, got 2.5",
        "/options/budget/max_hours": "unknown limit; a budget has max_input_tokens, max_output_tokens, "
                                     "max_cost_usd, max_requests",
        "/options/cache_ttl": "expected one of '5m', '1h', got '2h'"}
    assert list(rejected(client, {"calls": [ship()], "options": {"budget": "cheap"}})) == ["/options/budget"]


def test_bad_context_message_and_output_schema(client):
    problems = rejected(client, {"context": [{"type": "state", "data": {}}, {"type": "bogus"}],
                                 "output": {"type": "nonsense"}, "calls": [ship()]})
    assert set(problems) == {"/context/1/type", "/output/type"}
    assert "bogus" in problems["/context/1/type"]


def test_several_problems_at_once_give_one_error_naming_all(client):
    problems = rejected(client, {
        "callz": 1,
        "options": {"locale": "xx"},
        "calls": [
            {"_tool": "order", "sku": "A", "qty": "two"},
            ship(to="†state..a"),
            ship(_outputPath="†state.s", _outputMethod="upsert"),
            {"_tool": "order", "sku": "A", "qty": 1, "_scopes": ["secrets"]},
            {"_tool": "teleport"},
        ]})
    assert set(problems) == {"/callz", "/options/locale", "/calls/0/qty", "/calls/1/to", "/calls/2/_outputMethod",
                             "/calls/3/_scopes/0", "/calls/4/_tool"}


def test_schema_and_dependency_problems_are_reported_together(client):
    problems = rejected(client, {"options": {"locale": "xx"}, "calls": [
        {"_tool": "order", "sku": "A", "qty": "two"},
        ship(to="†state.nowhere"),
    ]})
    assert set(problems) == {"/options/locale", "/calls/0/qty", "/calls/1/to"}


# --------------------------------------------------------------------------- submission by Celery task name


def _start_worker(harness) -> InProcessWorker:
    """`harness.worker()` with the broker polled every 0.1 s, so stopping it at teardown is quick."""
    runtime = harness.runtime()
    runtime.app.conf.broker_transport_options = {**(runtime.app.conf.broker_transport_options or {}),
                                                 "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=True, engine=True, concurrency=2).start()
    harness._workers.append(worker)
    return worker


def _wait_for_job(client: Client, job_id: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not store_of(client).redis.exists(JobKeys(client.settings.namespace, job_id).job):
        assert time.monotonic() < deadline, f"job {job_id} was never written"
        time.sleep(0.02)


def test_submission_by_task_name_runs_a_valid_job(harness, client):
    harness.tools.register("ship", TOOLS["ship"])
    harness.activities.register("ship", lambda call: f"shipped to {call['to']}")
    _start_worker(harness)
    job = {"context": [{"type": "state", "data": {"city": "Lyon"}}],
           "calls": [{"_tool": "ship", "to": "†state.city", "_outputPath": "†state.shipping"}]}
    sender(harness).send_task("agentq.engine.submit", args=[job], kwargs={"job_id": "job_x"})
    _wait_for_job(client, "job_x")
    record = client.job("job_x").result(timeout=10)
    assert record["id"] == "job_x"
    assert record["status"] == "succeeded", record
    assert record["state"] == {"city": "Lyon", "shipping": "shipped to Lyon"}


def test_submission_by_task_name_and_by_client_carries_the_tenant(harness, client):
    harness.tools.register("ship", TOOLS["ship"])
    harness.activities.register("ship", lambda call: f"shipped to {call['to']}")
    _start_worker(harness)
    job = {"calls": [{"_tool": "ship", "to": "Lyon", "_outputPath": "†state.shipping"}]}
    sender(harness).send_task("agentq.engine.submit", args=[job], kwargs={"job_id": "job_acme", "tenant": "acme"})
    sender(harness).send_task("agentq.engine.submit", args=[job], kwargs={"job_id": "job_bad_tenant",
                                                                          "tenant": "no such/tenant"})
    _wait_for_job(client, "job_acme")
    _wait_for_job(client, "job_bad_tenant")
    assert client.job("job_acme").result(timeout=10)["tenant"] == "acme"
    refused = client.job("job_bad_tenant").result(timeout=10)
    assert (refused["status"], refused["tenant"], refused["error"]["type"]) == ("failed", "default",
                                                                                "JobValidationError")
    assert "not a tenant name" in refused["error"]["problems"][0]["message"]
    assert harness.client(tenant="globex").submit(job).result(timeout=10)["tenant"] == "globex"
    with pytest.raises(ConfigurationError, match=re.escape("Client(tenant=...): 'a b' is not a tenant name")):
        Client(settings=harness.settings, tenant="a b")


def test_submission_by_task_name_records_a_rejected_job_as_failed(harness, client):
    harness.tools.register("ship", TOOLS["ship"])
    harness.activities.register("ship", lambda call: "never runs")
    _start_worker(harness)
    bad = {"calls": [{"_tool": "teleport"}, {"_tool": "ship", "to": "†state..x"}], "options": {"locale": "xx"}}
    sender(harness).send_task("agentq.engine.submit", args=[bad], kwargs={"job_id": "job_bad"})
    # JSON text works the same way through the task
    sender(harness).send_task("agentq.engine.submit", args=['{"calls": ['], kwargs={"job_id": "job_text"})
    _wait_for_job(client, "job_bad")
    _wait_for_job(client, "job_text")
    record = client.job("job_bad").result(timeout=10)
    assert record["status"] == "failed" and record["finished_at"]
    assert record["error"]["type"] == "JobValidationError"
    assert {p["pointer"] for p in record["error"]["problems"]} == {"/calls/0/_tool", "/calls/1/to", "/options/locale"}
    assert record["state"] == {} and record["instances"] == {}
    keys = JobKeys(client.settings.namespace, "job_bad")
    for key in (keys.log, keys.calls, keys.status, keys.events):  # nothing of the job itself was written
        assert not store_of(client).redis.exists(key), key
    text = client.job("job_text").result(timeout=10)
    assert text["status"] == "failed" and [p["pointer"] for p in text["error"]["problems"]] == [""]
