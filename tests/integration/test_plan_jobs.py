"""Plan jobs end to end (docs/protocol.md: calls, output paths, instancing, scopes, references, failures): real
Redis, real Celery workers, real activity calls.

Every test submits a job through `Client.submit`, lets an in-process Celery worker run its calls, and asserts on
what the store holds afterwards: the job record, the context log and the event stream.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentq.errors import JobValidationError, NonRetryableError
from agentq.protocol import MISSING, resolve
from agentq.protocol.expressions import parse_ref
from agentq.protocol.messages import is_engine_written
from agentq.protocol.values import get_in
from agentq.runtime.worker import InProcessWorker
from tests.conformance_vectors import load_vectors
from tests.integration.conftest import store_of

TIMEOUT = 15.0


# ------------------------------------------------------------------------------------------------ helpers


def _vector_params(with_engine_writes: bool) -> list:
    """The conformance vectors (shipped in tests/data/conformance, see tests/conformance_vectors.py) whose log
    has engine writes, or has none."""
    vectors = [v for v in load_vectors() if any("_path" in m for m in v.data["log"]) == with_engine_writes]
    assert vectors, "the shipped conformance vectors have both kinds"
    return [pytest.param(v.data, id=v.name) for v in vectors]


def start_worker(harness, *, concurrency: int = 4, **settings) -> InProcessWorker:
    """Like `harness.worker()` (an in-process Celery worker serving the harness's activities and the engine
    queue), but the broker is polled every 0.1 s instead of every 1 s: stopping a worker waits for its pending
    BRPOP, so this keeps each test's teardown at ~0.1 s. Nothing else about the worker changes."""
    runtime = harness.runtime(**settings)
    options = dict(runtime.app.conf.broker_transport_options or {})
    runtime.app.conf.broker_transport_options = {**options, "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=len(runtime.activities) > 0, engine=True, concurrency=concurrency)
    worker.start()
    harness._workers.append(worker)  # stopped by the harness at teardown, before its runtimes are closed
    return worker


def submit(harness, job: dict):
    client = harness.client()
    handle = client.submit(job)
    return client, handle


def run(harness, job: dict, timeout: float = TIMEOUT) -> tuple[dict, list[dict], list[dict]]:
    """Run `job`; return (record, final log, event envelopes)."""
    client, handle = submit(harness, job)
    record = handle.result(timeout=timeout)
    log = store_of(client).read_log(handle.id)
    events = [e.data for e in handle.events(follow=False, technical=True)]
    return record, log, events


def engine_messages(log: list[dict], *kinds: str) -> list[dict]:
    return [m for m in log if m["type"] == "data" and is_engine_written(m) and (not kinds or m["kind"] in kinds)]


def error_messages(log: list[dict]) -> list[dict]:
    return [m for m in log if m["type"] == "error"]


def call_events(events: list[dict], name: str, tool: str | None = None) -> list[dict]:
    return [e for e in events if e["event"] == name and (tool is None or e.get("tool") == tool)]


# ------------------------------------------------------------------------ conformance vectors, replayed


@pytest.mark.parametrize("vector", _vector_params(with_engine_writes=True))
def test_conformance_vector_replayed_as_real_calls(harness, vector):
    """Each engine-written message of the vector is produced by a real call of a tool `emit`, in log order.

    Order: call i writes its vector path *and* (by `&&` fan-out) a marker `†order.m<i>`; call i+1 takes the
    parameter `after: "†order.m<i>"`, so by docs/protocol.md#references it is blocked until call i committed. The chain
    is therefore strictly sequential whatever the worker's concurrency, and the only extra messages are of kind `order`,
    which no vector expression reads.
    """
    harness.tool("emit", params={"value": {}, "after": {}})
    harness.activities.register("emit", lambda call: call["value"])
    start_worker(harness)

    context = [m for m in vector["log"] if "_call" not in m]
    written = [m for m in vector["log"] if "_call" in m]
    first_written = vector["log"].index(written[0])
    assert all("_call" in m for m in vector["log"][first_written:]), "context messages precede engine writes"
    calls = []
    for i, message in enumerate(written):
        path = message["_path"]
        value = get_in(message["data"], parse_ref(path).path)  # the value the message writes at its _path
        assert value is not MISSING
        call = {"_tool": "emit", "value": value, "_outputPath": f"{path} && †order.m{i}",
                "_outputMethod": message.get("_outputMethod", "set")}
        if message.get("_instance") is not None:
            call["_instance"] = message["_instance"]
        if i:
            call["after"] = f"†order.m{i - 1}"
        calls.append(call)

    record, log, _ = run(harness, {"context": context, "calls": calls})
    assert record["status"] == "succeeded", record

    # the engine wrote exactly the vector's messages, in the vector's order
    kinds = {m["kind"] for m in written}
    produced = [{k: m.get(k) for k in ("kind", "data", "_path", "_outputMethod", "_instance")}
                for m in engine_messages(log, *kinds)]
    expected = [{k: m.get(k) for k in ("kind", "data", "_path", "_outputMethod", "_instance")} for m in written]
    assert produced == expected
    assert [m["_call"]["_tool"] for m in engine_messages(log, *kinds)] == ["emit"] * len(written)

    value = resolve(log, vector["expression"], vector["instance"])
    if vector["expect"].get("missing"):
        assert value is MISSING
    else:
        assert value == vector["expect"]["value"]


@pytest.mark.parametrize("vector", _vector_params(with_engine_writes=False))
def test_conformance_vector_read_by_a_real_call(harness, vector):
    """Context-only vectors: a call of the vector's instance takes the expression as a parameter; the worker
    resolves it at run time. An expected `missing` can never resolve, so the job is rejected at submission."""
    harness.tool("probe", params={"value": {}})
    harness.activities.register("probe", lambda call: call["value"])
    start_worker(harness)
    call = {"_tool": "probe", "value": vector["expression"], "_outputPath": "†probe.value"}
    if vector["instance"] is not None:
        call["_instance"] = vector["instance"]
    job = {"context": vector["log"], "calls": [call]}
    if vector["expect"].get("missing"):
        with pytest.raises(JobValidationError) as caught:
            harness.client().submit(job)
        assert [p.pointer for p in caught.value.problems] == ["/calls/0/value"]
        return
    record, log, _ = run(harness, job)
    assert record["status"] == "succeeded", record
    assert resolve(log, "†probe.value", vector["instance"]) == vector["expect"]["value"]


# --------------------------------------------------------------------------------------- output paths


def test_and_fan_out_writes_one_result_to_every_path(harness):
    harness.tool("make", params={"n": {"type": "integer"}})
    harness.activities.register("make", lambda call: {"n": call["n"]})
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [
        {"_tool": "make", "n": 7, "_outputPath": "†state.a && †state.b.c && †summary.last"}]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {"a": {"n": 7}, "b": {"c": {"n": 7}}}
    assert resolve(log, "†summary.last") == {"n": 7}
    assert [m["_path"] for m in engine_messages(log)] == ["†state.a", "†state.b.c", "†summary.last"]
    assert len({m["_call"]["id"] for m in engine_messages(log)}) == 1


def test_or_branch_absorbs_a_failure_after_retries_and_the_job_goes_on(harness):
    attempts = []
    harness.tool("charge", params={"amount": {"type": "number"}})
    harness.tool("notify", params={"outcome": {}})

    def charge(call):
        attempts.append(call["amount"])
        raise RuntimeError("card declined")

    harness.activities.register("charge", charge, retries=1, retry_backoff=0.05)
    harness.activities.register("notify", lambda call: {"told": call["outcome"]})
    start_worker(harness)
    record, log, events = run(harness, {"calls": [
        {"_tool": "charge", "amount": 12.5, "_outputPath": "†state.paid || †state.declined"},
        {"_tool": "notify", "outcome": "†state.paid || †state.declined", "_outputPath": "†state.notice"},
    ]})
    assert attempts == [12.5, 12.5]  # the first attempt and its one retry
    assert record["status"] == "succeeded", record
    assert record["error"] is None
    declined = {"error": {"type": "RuntimeError", "message": "card declined"}}
    assert record["state"] == {"declined": declined, "notice": {"told": declined}}
    assert error_messages(log) == []  # the branch took the failure: no error message
    assert [e["attempt"] for e in call_events(events, "call.retrying", "charge")] == [1]
    finished = call_events(events, "call.finished", "charge")
    assert [(e["status"], e["absorbed"]) for e in finished] == [("failed", True)]


def test_activity_returning_a_data_message_chooses_the_second_alternative(harness):
    harness.tool("review", params={"amount": {"type": "number"}})
    harness.tool("after", params={"why": {"type": "string"}})

    def review(call):
        if call["amount"] > 100:
            return {"type": "data", "kind": "state", "data": {"rejected": {"reason": "too much"}}}
        return {"ok": True}

    harness.activities.register("review", review)
    harness.activities.register("after", lambda call: call["why"].upper())
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [
        {"_tool": "review", "amount": 500, "_outputPath": "†state.approved || †state.rejected"},
        {"_tool": "after", "why": "†state.rejected.reason", "_outputPath": "†state.echo"},
    ]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {"rejected": {"reason": "too much"}, "echo": "TOO MUCH"}
    assert "approved" not in record["state"]
    paths = [m["_path"] for m in engine_messages(log)]
    assert paths == ["†state.rejected", "†state.echo"]


def test_output_methods_push_merge_assign_concat_through_real_calls(harness):
    harness.tool("give", params={"value": {}, "after": {}})
    harness.activities.register("give", lambda call: call["value"])
    start_worker(harness)
    record, log, _ = run(harness, {
        "context": [{"type": "state", "data": {"log": ["a"], "cfg": {"a": {"x": 1}, "b": 2},
                                               "shallow": {"a": {"x": 1}, "b": 2}, "xs": [1, 2]}}],
        "calls": [
            {"_tool": "give", "value": "b", "_outputPath": "†state.log && †order.one", "_outputMethod": "push"},
            {"_tool": "give", "value": "c", "after": "†order.one", "_outputPath": "†state.log",
             "_outputMethod": "push"},
            {"_tool": "give", "value": {"a": {"y": 2}}, "_outputPath": "†state.cfg", "_outputMethod": "merge"},
            {"_tool": "give", "value": {"a": {"y": 2}}, "_outputPath": "†state.shallow", "_outputMethod": "assign"},
            {"_tool": "give", "value": [3, 4], "_outputPath": "†state.xs", "_outputMethod": "concat"},
            {"_tool": "give", "value": "first", "_outputPath": "†state.fresh", "_outputMethod": "push"},
        ]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {
        "log": ["a", "b", "c"],
        "cfg": {"a": {"x": 1, "y": 2}, "b": 2},
        "shallow": {"a": {"y": 2}, "b": 2},
        "xs": [1, 2, 3, 4],
        "fresh": ["first"],
    }
    methods = {m["_path"]: m["_outputMethod"] for m in engine_messages(log, "state")}
    assert methods == {"†state.log": "push", "†state.cfg": "merge", "†state.shallow": "assign",
                       "†state.xs": "concat", "†state.fresh": "push"}


def test_concurrent_pushes_to_one_path_keep_every_item(harness):
    harness.tool("give", params={"value": {}})
    harness.activities.register("give", lambda call: call["value"])
    start_worker(harness, concurrency=4)
    record, _, _ = run(harness, {"calls": [
        {"_tool": "give", "value": i, "_outputPath": "†state.items", "_outputMethod": "push"} for i in range(8)]})
    assert record["status"] == "succeeded", record
    assert sorted(record["state"]["items"]) == list(range(8))


def test_push_onto_a_non_array_fails_that_call_with_a_clear_error(harness):
    harness.tool("give", params={"value": {}})
    harness.activities.register("give", lambda call: call["value"])
    start_worker(harness)
    record, log, _events = run(harness, {
        "context": [{"type": "state", "data": {"title": "not a list"}}],
        "calls": [
            {"_tool": "give", "value": "x", "_outputPath": "†state.title", "_outputMethod": "push"},
            {"_tool": "give", "value": [1], "_outputPath": "†state.other", "_outputMethod": "concat"},
        ]})
    assert record["status"] == "failed", record
    assert record["state"] == {"title": "not a list", "other": [1]}
    errors = error_messages(log)
    assert len(errors) == 1
    error = errors[0]["data"]["error"]
    assert error["type"] == "WriteError"
    assert "push" in error["message"] and "†state.title" in error["message"] and "a string" in error["message"]
    assert errors[0]["data"]["call"]["_outputPath"] == "†state.title"
    assert "give" in record["error"]["message"] and "WriteError" in record["error"]["message"]
    assert not any(m.get("_path") == "†state.title" for m in engine_messages(log))


# ----------------------------------------------------------------------------------------- instancing


def test_instanced_calls_see_their_own_input_and_the_global_one(harness) -> None:
    seen: dict[str, dict] = {}
    harness.tool("greet", params={"name": {"type": "string"}, "greeting": {"type": "string"}},
                 _scopes={"const": ["input"]})

    def greet(call, context):
        seen[call["_instance"]] = {"view": context["input"],
                                   "messages": [(m["data"], m.get("_instance")) for m in context.messages]}
        return f"{call['greeting']}, {call['name']}"

    harness.activities.register("greet", greet)
    start_worker(harness)
    instances = ["①", "②", "employee_B"]
    record, log, _ = run(harness, {
        "context": [
            {"type": "input", "data": {"greeting": "Hello", "name": "nobody"}},
            *({"type": "input", "data": {"name": f"N{i}"}, "_instance": inst} for i, inst in enumerate(instances)),
            {"type": "state", "data": {"shared": True}},
        ],
        "calls": [{"_tool": "greet", "_instance": inst, "name": "†input.name", "greeting": "†input.greeting",
                   "_outputPath": "†state.message"} for inst in instances],
    })
    assert record["status"] == "succeeded", record
    assert record["state"] == {"shared": True}  # instanced writes never reach the global view
    assert record["instances"] == {inst: {"shared": True, "message": f"Hello, N{i}"}
                                   for i, inst in enumerate(instances)}
    for i, inst in enumerate(instances):
        assert seen[inst]["view"] == {"greeting": "Hello", "name": f"N{i}"}
        assert seen[inst]["messages"] == [({"greeting": "Hello", "name": "nobody"}, None), ({"name": f"N{i}"}, inst)]
    for message in engine_messages(log, "state"):
        assert message["_instance"] == message["_call"]["_instance"]


def test_instanced_call_reads_only_its_instance_writes(harness):
    harness.tool("give", params={"value": {}})
    harness.tool("read", params={"value": {}})
    harness.activities.register("give", lambda call: call["value"])
    harness.activities.register("read", lambda call: call["value"])
    start_worker(harness)
    record, _, _ = run(harness, {"calls": [
        {"_tool": "give", "_instance": "A", "value": "from A", "_outputPath": "†state.x"},
        {"_tool": "give", "_instance": "B", "value": "from B", "_outputPath": "†state.x"},
        {"_tool": "read", "_instance": "A", "value": "†state.x", "_outputPath": "†state.copy"},
        {"_tool": "read", "_instance": "B", "value": "†state.x", "_outputPath": "†state.copy"},
    ]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {}
    assert record["instances"] == {"A": {"x": "from A", "copy": "from A"}, "B": {"x": "from B", "copy": "from B"}}


# --------------------------------------------------------------------------------------------- scopes


def test_scoped_context_holds_exactly_the_scoped_kinds(harness) -> None:
    seen: dict[str, dict] = {}
    scopes = {"type": "array", "items": {"enum": ["state", "input", "text"]}}
    harness.tool("look", params={"label": {"type": "string"}}, _scopes=scopes)

    def look(call, tool, context):
        entry = {"kinds": sorted({m.get("kind", m["type"]) for m in context.messages}),
                 "count": len(context.messages), "scopes": list(context.kinds)}
        for kind in ("state", "input"):
            try:
                entry[kind] = context[kind]
            except KeyError as error:
                entry[kind + "_error"] = str(error)
        try:
            entry["attr_state"] = context.state
        except AttributeError:
            entry["attr_state"] = "unavailable"
        seen[call["label"]] = entry
        return call["label"]

    harness.activities.register("look", look)
    start_worker(harness)
    record, _, _ = run(harness, {
        "context": [
            {"type": "text", "role": "system", "text": "be brief"},
            {"type": "input", "data": {"q": "secret question"}},
            {"type": "state", "data": {"count": 1}},
            {"type": "state", "data": {"more": 2}},
            {"type": "data", "kind": "notes", "data": {"n": 1}},
        ],
        "calls": [
            {"_tool": "look", "label": "state-only", "_scopes": ["state"], "_outputPath": "†out.a"},
            {"_tool": "look", "label": "input-and-text", "_scopes": ["input", "text"], "_outputPath": "†out.b"},
            {"_tool": "look", "label": "nothing", "_outputPath": "†out.c"},
        ],
    })
    assert record["status"] == "succeeded", record
    state_only = seen["state-only"]
    assert state_only["kinds"] == ["state"] and state_only["count"] == 2 and state_only["scopes"] == ["state"]
    assert state_only["state"] == {"count": 1, "more": 2} and state_only["attr_state"] == {"count": 1, "more": 2}
    assert "input" not in state_only and "not in this call's scope" in state_only["input_error"]
    mixed = seen["input-and-text"]
    assert mixed["kinds"] == ["input", "text"] and mixed["count"] == 2
    assert mixed["input"] == {"q": "secret question"} and "state" not in mixed
    nothing = seen["nothing"]
    assert nothing["count"] == 0 and nothing["scopes"] == [] and nothing["attr_state"] == "unavailable"
    assert "state" not in nothing and "input" not in nothing


def test_provisioned_scopes_are_given_without_asking(harness):
    seen = {}
    harness.tool("audit", params={}, _scopes={"const": ["state"]})

    def audit(context):
        seen["state"] = context["state"]
        seen["kinds"] = sorted({m["kind"] for m in context.messages})
        return "ok"

    harness.activities.register("audit", audit)
    start_worker(harness)
    record, _, _ = run(harness, {
        "context": [{"type": "state", "data": {"v": 1}}, {"type": "input", "data": {"hidden": True}}],
        "calls": [{"_tool": "audit", "_outputPath": "†state.audit"}]})
    assert record["status"] == "succeeded", record
    assert seen == {"state": {"v": 1}, "kinds": ["state"]}


def test_scoped_context_sees_writes_of_earlier_calls(harness):
    seen = {}
    harness.tool("give", params={"value": {}})
    harness.tool("sum", params={"after": {}}, _scopes={"const": ["state"]})
    harness.activities.register("give", lambda call: call["value"])

    def total(call, context):
        seen["state"] = context["state"]
        return sum(context["state"]["numbers"])

    harness.activities.register("sum", total)
    start_worker(harness)
    record, _, _ = run(harness, {
        "context": [{"type": "state", "data": {"numbers": [1]}}],
        "calls": [
            {"_tool": "give", "value": 2, "_outputPath": "†state.numbers", "_outputMethod": "push"},
            {"_tool": "sum", "after": "†state.numbers.1", "_outputPath": "†state.total"},
        ]})
    assert record["status"] == "succeeded", record
    assert seen["state"] == {"numbers": [1, 2]}
    assert record["state"]["total"] == 3


# -------------------------------------------------------------------------------------- references


def test_references_inside_nested_objects_and_arrays_are_resolved(harness):
    got = {}
    harness.tool("deep", params={"payload": {"type": "object"}, "items": {"type": "array"},
                                 "plain": {"type": "string"}})

    def deep(call):
        got.update(call)
        return "ok"

    harness.activities.register("deep", deep)
    start_worker(harness)
    record, _, _ = run(harness, {
        "context": [{"type": "state", "data": {"user": {"name": "Alex", "tags": ["a", "b"]}, "n": 0}},
                    {"type": "input", "data": {"q": "why"}}],
        "calls": [{"_tool": "deep", "plain": "  †state.user.name  ", "payload": {
            "who": "†state.user.name", "second_tag": "†state.user.tags.1", "nested": {"q": "†input.q"},
            "fallback": "†state.nope || †state.n", "literal": "not † a reference"},
            "items": ["†state.user.tags", 3, {"deeper": ["†input.q"]}], "_outputPath": "†state.done"}],
    })
    assert record["status"] == "succeeded", record
    assert got["plain"] == "Alex"
    assert got["payload"] == {"who": "Alex", "second_tag": "b", "nested": {"q": "why"}, "fallback": 0,
                              "literal": "not † a reference"}
    assert got["items"] == [["a", "b"], 3, {"deeper": ["why"]}]
    assert got["_outputPath"] == "†state.done"  # meta fields stay literal


def test_reference_unresolvable_at_run_time_fails_the_call_structurally(harness):
    ran = []
    harness.tool("check", params={"amount": {"type": "number"}})
    harness.tool("explain", params={"reason": {"type": "string"}})
    harness.activities.register("check", lambda call: "fine")

    def explain(call):
        ran.append(call)
        return call["reason"]

    harness.activities.register("explain", explain)
    start_worker(harness)
    record, log, events = run(harness, {"calls": [
        {"_tool": "check", "amount": 3, "_outputPath": "†state.ok || †state.problem"},
        {"_tool": "explain", "reason": "†state.problem.error.message", "_outputPath": "†state.explained"},
    ]})
    assert ran == []  # the activity never ran
    assert record["status"] == "failed", record
    assert record["state"] == {"ok": "fine"}
    [error] = error_messages(log)
    assert error["data"]["call"]["_tool"] == "explain"
    assert error["data"]["error"]["type"] == "UnresolvedReference"
    assert "/reason" in error["data"]["error"]["message"]
    assert "explain" in record["error"]["message"]
    assert [e["status"] for e in call_events(events, "call.finished", "explain")] == ["failed"]


# --------------------------------------------------------------------------------- fire-and-forget


def test_fire_and_forget_call_runs_without_blocking_completion_and_writes_nothing(harness):
    release, finished = threading.Event(), threading.Event()
    harness.tool("log_event", params={"what": {"type": "string"}})
    harness.tool("work", params={"n": {"type": "integer"}})

    def log_event(call):
        release.wait(10)
        finished.set()
        return {"logged": call["what"]}

    harness.activities.register("log_event", log_event)
    harness.activities.register("work", lambda call: call["n"] + 1)
    start_worker(harness, concurrency=4)
    client, handle = submit(harness, {"calls": [
        {"_tool": "log_event", "what": "started"},
        {"_tool": "work", "n": 1, "_outputPath": "†state.n"},
    ]})
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert not finished.is_set()  # the job finished while the fire-and-forget call was still running
    release.set()
    assert finished.wait(10)
    deadline = time.monotonic() + 10
    while "running" in store_of(client).call_statuses(handle.id).values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(store_of(client).call_statuses(handle.id).values()) == ["done", "done"]
    log = store_of(client).read_log(handle.id)
    assert [m["_path"] for m in engine_messages(log)] == ["†state.n"]
    assert store_of(client).record(handle.id).state == {"n": 2}


def test_job_of_only_fire_and_forget_calls_completes_without_waiting_for_them(harness):
    release, ran = threading.Event(), threading.Event()
    harness.tool("ping", params={})

    def ping(call):
        ran.set()
        release.wait(10)
        return "pong"

    harness.activities.register("ping", ping)
    start_worker(harness)
    try:
        _client, handle = submit(harness, {"context": [{"type": "state", "data": {"a": 1}}],
                                           "calls": [{"_tool": "ping"}]})
        record = handle.result(timeout=5)
        assert record["status"] == "succeeded", record
        assert record["state"] == {"a": 1}
        assert ran.wait(5)  # it was dispatched all the same
    finally:
        release.set()


def test_plan_job_with_no_calls_succeeds_with_its_context_state(harness):
    harness.tool("noop", params={})
    harness.activities.register("noop", lambda call: None)
    start_worker(harness)
    record, _, events = run(harness, {"context": [{"type": "state", "data": {"a": 1}}], "calls": []}, timeout=5)
    assert record["status"] == "succeeded", record
    assert record["state"] == record["result"] == {"a": 1}
    assert events[-1]["event"] == "job.finished"


# ------------------------------------------------------------------------------------------- failures


def test_activity_that_raises_fails_the_job_naming_the_call_and_keeps_other_writes(harness):
    harness.tool("good", params={"v": {}})
    harness.tool("bad", params={"v": {}})
    harness.activities.register("good", lambda call: call["v"])

    def bad(call):
        raise ValueError(f"cannot handle {call['v']}")

    harness.activities.register("bad", bad)
    start_worker(harness)
    record, log, events = run(harness, {
        "context": [{"type": "state", "data": {"kept": True}}],
        "calls": [
            {"_tool": "good", "v": 1, "_outputPath": "†state.one"},
            {"_tool": "bad", "v": 2, "_outputPath": "†state.two"},
            {"_tool": "good", "v": 3, "_outputPath": "†state.three"},
        ]})
    assert record["status"] == "failed", record
    assert record["state"] == {"kept": True, "one": 1, "three": 3}
    assert record["result"] == record["state"]
    [error] = error_messages(log)
    bad_id = error["data"]["call"]["id"]
    assert error["data"]["call"]["_tool"] == "bad"
    assert error["data"]["error"] == {"type": "ValueError", "message": "cannot handle 2"}
    assert record["error"]["type"] == "CallsFailed"
    assert "bad" in record["error"]["message"] and bad_id in record["error"]["message"]
    assert "cannot handle 2" in record["error"]["message"]
    assert "good" not in record["error"]["message"]
    assert events[-1]["event"] == "job.finished" and events[-1]["status"] == "failed"


def test_retries_then_success_ends_done_with_attempt_events(harness):
    attempts = []
    harness.tool("flaky", params={})

    def flaky(call):
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise ConnectionError(f"attempt {len(attempts)} failed")
        return "third time lucky"

    harness.activities.register("flaky", flaky, retries=2, retry_backoff=0.05)
    start_worker(harness)
    record, log, events = run(harness, {"calls": [{"_tool": "flaky", "_outputPath": "†state.result"}]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {"result": "third time lucky"}
    assert len(attempts) == 3
    assert [e["attempt"] for e in call_events(events, "call.started")] == [1, 2, 3]
    retrying = call_events(events, "call.retrying")
    assert [e["attempt"] for e in retrying] == [1, 2]
    assert [e["error"] for e in retrying] == [{"type": "ConnectionError", "message": "attempt 1 failed"},
                                               {"type": "ConnectionError", "message": "attempt 2 failed"}]
    assert all(e["retry_in_s"] > 0 for e in retrying)
    assert [e["status"] for e in call_events(events, "call.finished")] == ["done"]
    assert error_messages(log) == []


def test_retries_exhausted_fail_the_call(harness):
    attempts = []
    harness.tool("down", params={})

    def down(call):
        attempts.append(1)
        raise ConnectionError("service down")

    harness.activities.register("down", down, retries=2, retry_backoff=0.05)
    start_worker(harness)
    record, log, events = run(harness, {"calls": [{"_tool": "down", "_outputPath": "†state.result"}]})
    assert len(attempts) == 3
    assert record["status"] == "failed", record
    assert [m["data"]["error"] for m in error_messages(log)] == [{"type": "ConnectionError",
                                                                 "message": "service down"}]
    assert len(call_events(events, "call.retrying")) == 2


def test_non_retryable_error_skips_retries(harness):
    attempts = []
    harness.tool("strict", params={})

    def strict(call):
        attempts.append(1)
        raise NonRetryableError("invalid account", type="InvalidAccount")

    harness.activities.register("strict", strict, retries=3, retry_backoff=0.05)
    start_worker(harness)
    record, log, events = run(harness, {"calls": [{"_tool": "strict", "_outputPath": "†state.result"}]})
    assert attempts == [1]
    assert record["status"] == "failed", record
    assert [m["data"]["error"] for m in error_messages(log)] == [{"type": "InvalidAccount",
                                                                 "message": "invalid account"}]
    assert call_events(events, "call.retrying") == []


# ------------------------------------------------------------------------------ async, timeouts, parallel


def test_async_handlers_work(harness):
    harness.tool("fetch", params={"url": {"type": "string"}})
    harness.tool("size", params={"body": {"type": "string"}}, _scopes={"const": ["state"]})

    async def fetch(call, tool, context):
        await asyncio.sleep(0.01)
        return f"<body of {call['url']} via {tool['properties']['_tool']['const']}>"

    async def size(call, context):
        await asyncio.sleep(0)
        return {"len": len(call["body"]), "seen": sorted(context["state"])}

    harness.activities.register("fetch", fetch)
    harness.activities.register("size", size)
    start_worker(harness)
    record, _, _ = run(harness, {"calls": [
        {"_tool": "fetch", "url": "u", "_outputPath": "†state.body"},
        {"_tool": "size", "body": "†state.body", "_outputPath": "†state.size"},
    ]})
    assert record["status"] == "succeeded", record
    assert record["state"]["body"] == "<body of u via fetch>"
    assert record["state"]["size"] == {"len": len("<body of u via fetch>"), "seen": ["body"]}


def test_async_handler_exceeding_its_timeout_fails_with_a_timeout_error(harness):
    harness.tool("slow", params={})

    async def slow(call):
        await asyncio.Event().wait()  # never set: only the activity's timeout ends it, within run()'s wait
        return "too late"

    harness.activities.register("slow", slow, timeout=0.3)
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [{"_tool": "slow", "_outputPath": "†state.result"}]})
    assert record["status"] == "failed", record
    [error] = error_messages(log)
    assert error["data"]["error"]["type"] == "TimeoutError"
    assert "timed out after 0.3 s" in error["data"]["error"]["message"]
    assert "state" not in record["state"] and record["state"] == {}


def test_independent_calls_run_in_parallel(harness):
    together = threading.Barrier(4)  # passed only by four calls running at the same time
    harness.tool("nap", params={"i": {"type": "integer"}})

    def nap(call):
        try:
            together.wait(timeout=TIMEOUT / 2)
        except threading.BrokenBarrierError:
            return "alone"
        return call["i"]

    harness.activities.register("nap", nap)
    start_worker(harness, concurrency=4)
    record, _, _ = run(harness, {"calls": [{"_tool": "nap", "i": i, "_outputPath": f"†state.r{i}"}
                                           for i in range(4)]})
    assert record["status"] == "succeeded", record
    assert record["state"] == {f"r{i}": i for i in range(4)}  # all four were running at the same time


def test_dependent_calls_wait_for_their_inputs(harness):
    order = []
    harness.tool("step", params={"name": {"type": "string"}, "after": {}})

    def step(call):
        order.append(call["name"])
        time.sleep(0.05)
        return call["name"]

    harness.activities.register("step", step)
    start_worker(harness, concurrency=4)
    record, _, _ = run(harness, {"calls": [
        {"_tool": "step", "name": "c", "after": ["†state.a", "†state.b"], "_outputPath": "†state.c"},
        {"_tool": "step", "name": "b", "after": "†state.a", "_outputPath": "†state.b"},
        {"_tool": "step", "name": "a", "_outputPath": "†state.a"},
    ]})
    assert record["status"] == "succeeded", record
    assert order == ["a", "b", "c"]
    assert record["state"] == {"a": "a", "b": "b", "c": "c"}


def test_parallel_calls_of_one_job_see_consistent_views(harness):
    """Calls of one job running in threads of one worker share that process's cached index of the job's log;
    each must still see every write exactly once (no write lost or applied twice while another thread folds).

    24 calls concat 20 000 numbers each onto †state.items; then 8 readers resolve, in parallel, the element
    just past the end (must not exist) falling back to the last one (must exist)."""
    block, blocks, readers = 20_000, 24, 8
    total = block * blocks
    harness.tool("fill", params={"i": {"type": "integer"}})
    harness.tool("read", params={"last": {}})
    harness.activities.register("fill", lambda call: list(range(call["i"] * block, (call["i"] + 1) * block)))
    harness.activities.register("read", lambda call: call["last"])
    start_worker(harness, concurrency=readers)
    record, _, _ = run(harness, {"calls": [
        *({"_tool": "fill", "i": i, "_outputPath": "†state.items", "_outputMethod": "concat"} for i in range(blocks)),
        *({"_tool": "read", "last": f"†state.items.{total} || †state.items.{total - 1}",
           "_outputPath": f"†state.seen.r{r}"} for r in range(readers)),
    ]}, timeout=30)
    assert record["status"] == "succeeded", record["error"]
    items = record["state"]["items"]
    assert len(items) == total and sorted(items) == list(range(total))
    assert record["state"]["seen"] == {f"r{r}": items[-1] for r in range(readers)}


def test_activity_returning_a_value_that_is_not_json_fails_its_call_clearly(harness):
    harness.tool("odd", params={})
    harness.tool("fine", params={})
    harness.activities.register("odd", lambda call: {"when": {1, 2}})
    harness.activities.register("fine", lambda call: "ok")
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [{"_tool": "odd", "_outputPath": "†state.odd"},
                                             {"_tool": "fine", "_outputPath": "†state.fine"}]}, timeout=10)
    assert record["status"] == "failed", record
    assert record["state"] == {"fine": "ok"}
    [error] = error_messages(log)
    assert error["data"]["call"]["_tool"] == "odd"
    assert "JSON" in error["data"]["error"]["message"] and "set" in error["data"]["error"]["message"]


def test_sync_handler_exceeding_its_timeout_fails_with_a_timeout_error(harness):
    harness.tool("slow_sync", params={})

    def slow_sync(call):
        time.sleep(1.0)
        return "too late"

    harness.activities.register("slow_sync", slow_sync, timeout=0.3)
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [{"_tool": "slow_sync", "_outputPath": "†state.result"}]})
    assert record["status"] == "failed", record
    [error] = error_messages(log)
    assert "timed out after 0.3 s" in error["data"]["error"]["message"]
    assert record["state"] == {}


def test_reference_resolving_to_a_value_of_the_wrong_type_fails_the_call(harness):
    ran = []
    harness.tool("count", params={})
    harness.tool("label", params={"text": {"type": "string"}})
    harness.activities.register("count", lambda call: 42)
    harness.activities.register("label", lambda call: ran.append(call) or call["text"])
    start_worker(harness)
    record, log, _ = run(harness, {"calls": [
        {"_tool": "count", "_outputPath": "†state.n"},
        {"_tool": "label", "text": "†state.n", "_outputPath": "†state.label"},
    ]})
    assert ran == []
    assert record["status"] == "failed", record
    assert record["state"] == {"n": 42}
    [error] = error_messages(log)
    assert error["data"]["call"]["_tool"] == "label"
    assert error["data"]["error"]["type"] == "CallValidationError"
    assert "/text" in error["data"]["error"]["message"] and "string" in error["data"]["error"]["message"]


def test_or_branch_absorbs_a_structural_failure_too(harness):
    harness.tool("check", params={})
    harness.tool("explain", params={"reason": {"type": "string"}})
    harness.activities.register("check", lambda call: "fine")
    harness.activities.register("explain", lambda call: call["reason"])
    start_worker(harness)
    record, _, _ = run(harness, {"calls": [
        {"_tool": "check", "_outputPath": "†state.ok || †state.problem"},
        {"_tool": "explain", "reason": "†state.problem.error.message",
         "_outputPath": "†state.explained || †state.unexplained"},
    ]})
    assert record["status"] == "succeeded", record
    assert record["state"]["ok"] == "fine"
    assert record["state"]["unexplained"]["error"]["type"] == "UnresolvedReference"
    assert "explained" not in record["state"]
