"""Every bad input at agentq's boundaries is handled (docs/architecture.md#runtime--the-only-place-that-knows-celery,
docs/protocol.md#the-job-record): the exact error, and nothing written.

Against the session's private Redis and real in-process Celery workers. "Nothing written" is asserted on the
keys themselves (no `agentq:{...}` key of any job before and after); "the task was consumed" is asserted on
Celery's `task_postrun` signal for that task's id, never by sleeping and hoping nothing happened.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import pytest

from agentq.client import Client
from agentq.engine.routing import Routing
from agentq.errors import JobValidationError, StoreUnavailableError
from agentq.protocol.records import WorkerAnnouncement
from agentq.runtime.app import task_id
from agentq.runtime.worker import InProcessWorker
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.keys import JobKeys
from tests.integration.conftest import store_of, tool_schema
from tests.integration.test_job_validation import assert_nothing_written, job_keys, sender

ID_RULE = "use 1 to 128 letters, digits and _ . : -, starting with a letter or digit"
TOOLS = {"good": tool_schema("good"), "evil": tool_schema("evil")}


# ------------------------------------------------------------------------------------------------ helpers


class TaskLog:
    """The ids, names and return values of the tasks the in-process workers finished (`task_postrun`; a
    delivery that ends in a retry does not count)."""

    def __init__(self) -> None:
        self.finished: dict[str, tuple[str, object]] = {}
        self._changed = threading.Condition()

    def __call__(self, sender=None, task_id=None, task=None, retval=None, state=None, **_: object) -> None:
        if state == "RETRY":  # it runs again later (e.g. it found its call leased by another attempt)
            return
        with self._changed:
            self.finished[task_id] = (getattr(task, "name", ""), retval)
            self._changed.notify_all()

    def wait(self, *ids: str, timeout: float = 20.0) -> dict[str, object]:
        """Wait until every task in `ids` ran to its end; their return values."""
        with self._changed:
            if not self._changed.wait_for(lambda: all(i in self.finished for i in ids), timeout):
                missing = [i for i in ids if i not in self.finished]
                raise AssertionError(f"tasks {missing} never finished (finished: {list(self.finished)})")
            return {i: self.finished[i][1] for i in ids}


@pytest.fixture
def tasks():
    from celery.signals import task_postrun

    log = TaskLog()
    task_postrun.connect(log, weak=False)
    try:
        yield log
    finally:
        task_postrun.disconnect(log)


def start_worker(harness, **settings) -> InProcessWorker:
    """A worker serving the harness's activities and the engine queue, polling the broker every 0.1 s."""
    runtime = harness.runtime(**settings)
    runtime.app.conf.broker_transport_options = {**(runtime.app.conf.broker_transport_options or {}),
                                                 "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=True, engine=True, concurrency=2).start()
    harness._workers.append(worker)
    return worker


def publish(client: Client) -> None:
    RedisFleet(store_of(client)).publish_tools(TOOLS, publisher="tests")


def no_tracebacks(caplog) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [(r.name, r.getMessage()) for r in bad]


def warnings_about(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def nested(depth: int) -> dict:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


# ------------------------------------------------------------------------------------ an unreachable Redis


def test_an_unreachable_redis_is_a_store_unavailable_error():
    url = f"redis://127.0.0.1:{closed_port()}/0"
    with Client(url) as client:
        with pytest.raises(StoreUnavailableError) as caught:
            client.submit({"calls": []})
        assert str(caught.value).startswith(f"cannot reach the state store at {url}: ")
        with pytest.raises(StoreUnavailableError):
            client.job("job_1")
        with pytest.raises(StoreUnavailableError):
            client.ping()


def test_the_url_in_the_error_hides_the_password():
    url = f"redis://user:s3cret@127.0.0.1:{closed_port()}/0"
    with Client(url) as client, pytest.raises(StoreUnavailableError) as caught:
        client.submit({"calls": []})
    assert "s3cret" not in str(caught.value) and "user:***@127.0.0.1" in str(caught.value)


# --------------------------------------------------------------------------------- too deep, bad job ids


@pytest.mark.parametrize("as_text", [False, True])
def test_a_job_nested_10000_deep_is_one_clear_error(harness, as_text):
    client = harness.client()
    publish(client)
    job = {"context": [{"type": "state", "data": nested(10_000)}], "calls": []}
    if as_text:
        job = '{"context": [{"type": "state", "data": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}], \"calls\": []}"
    with pytest.raises(JobValidationError) as caught:
        client.submit(job)
    assert not isinstance(caught.value.__context__, RecursionError)
    assert "nested deeper than 64 levels (AGENTQ_MAX_DEPTH)" in str(caught.value)
    assert len(caught.value.problems) == 1
    if not as_text:  # a value says where it is too deep
        assert caught.value.problems[0].pointer.startswith("/context/0/data/a/a/")
    assert_nothing_written(client)


def test_brackets_inside_strings_are_not_nesting(harness):
    """The control case of the depth limit: 10,000 brackets inside a string value are text, not nesting."""
    client = harness.client()
    text = json.dumps({"context": [{"type": "state", "data": {"s": "[{" * 5_000 + '\\"'}}], "calls": []})
    assert client.submit(text).result(timeout=5)["state"] == {"s": "[{" * 5_000 + '\\"'}


@pytest.mark.parametrize("job_id", ["}lead", "a b", "", "x" * 129, {"a": 1}, "{job}", "job\n", "-lead", 7])
def test_a_bad_sender_chosen_job_id_is_rejected_before_any_key(harness, job_id):
    client = harness.client()
    publish(client)
    with pytest.raises(JobValidationError) as caught:
        client.submit({"calls": [{"_tool": "good"}]}, job_id=job_id)
    message = str(caught.value)
    assert ID_RULE in message or "a job id must be a string" in message, message
    assert_nothing_written(client)


def test_a_good_sender_chosen_job_id_of_128_characters_is_accepted(harness):
    client = harness.client()
    publish(client)
    job_id = "J" + "x" * 127
    assert client.submit({"calls": []}, job_id=job_id).id == job_id
    assert job_keys(client)  # the control case: this one was written


@pytest.mark.parametrize("job_id", [{"a": 1}, "}lead", "a b", "x" * 129])
def test_a_bad_job_id_by_task_name_writes_nothing_and_logs_one_warning(harness, tasks, caplog, job_id):
    caplog.set_level(logging.WARNING)
    harness.tools.register("good", TOOLS["good"])
    harness.activities.register("good", lambda call: "ok")
    start_worker(harness)
    client = harness.client()
    job = {"calls": [{"_tool": "good", "_outputPath": "†state.ok"}]}
    app = sender(harness)
    app.send_task("agentq.engine.submit", args=[job], kwargs={"job_id": job_id}, task_id="bad-id")
    app.send_task("agentq.engine.submit", args=[job], kwargs={"job_id": "job_after"}, task_id="good-id")
    tasks.wait("bad-id", "good-id")
    assert client.job("job_after").result(timeout=10)["status"] == "succeeded"
    # only the valid job's keys exist: none of the bad id, and nothing recorded as rejected
    assert {k.split("}")[0] for k in job_keys(client)} == {f"{client.settings.namespace}:{{job_after"}
    assert store_of(client).recent_jobs() == ["job_after"]
    lines = warnings_about(caplog, "rejected before anything was written")
    assert len(lines) == 1 and ("a job id must be a string" in lines[0] or ID_RULE in lines[0]), lines
    no_tracebacks(caplog)


def test_a_rejected_job_by_task_name_is_recorded_with_its_ttl_in_one_step(harness, tasks) -> None:
    """The rejection record (the job hash) and its end signal (the `done` list) are written in one MULTI with
    their TTLs: MONITOR sees every write to those keys between one MULTI and its EXEC."""
    harness.activities.register("good", lambda call: "ok")
    harness.tools.register("good", TOOLS["good"])
    start_worker(harness, job_ttl_s=600)
    client = harness.client()
    keys = JobKeys(client.settings.namespace, "job_rejected")
    commands: list[str] = []
    monitor_ready = threading.Event()

    def watch() -> None:
        import redis

        connection = redis.Redis.from_url(harness.settings.redis_url, decode_responses=True)
        with connection.monitor() as monitor:
            monitor_ready.set()
            for entry in monitor.listen():
                commands.append(entry["command"])
                if entry["command"].startswith("EXEC") and any(keys.done in c for c in commands):
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert monitor_ready.wait(5)
    sender(harness).send_task("agentq.engine.submit", args=[{"calls": [{"_tool": "teleport"}]}],
                              kwargs={"job_id": "job_rejected"}, task_id="rejected")
    tasks.wait("rejected")
    watcher.join(10)
    assert not watcher.is_alive(), commands

    redis = store_of(client).redis
    assert 0 < redis.ttl(keys.job) <= 600
    assert 0 < redis.ttl(keys.done) <= 600
    assert redis.lrange(keys.done, 0, -1) == ["failed"]
    record = client.job("job_rejected").result(timeout=1)
    assert record["status"] == "failed" and record["error"]["type"] == "JobValidationError"
    assert [p["pointer"] for p in record["error"]["problems"]] == ["/calls/0/_tool"]
    for key in (keys.log, keys.calls, keys.status, keys.events):
        assert not redis.exists(key), key

    writes = [i for i, c in enumerate(commands) if keys.job in c or keys.done in c]
    writes = [i for i in writes if not commands[i].startswith(("WATCH", "EXISTS", "HGET", "BLMOVE"))]
    assert writes, commands
    begin = max(i for i, c in enumerate(commands[:writes[0]]) if c.startswith("MULTI"))
    end = min(i for i, c in enumerate(commands) if i > writes[-1] and c.startswith("EXEC"))
    assert not any(c.startswith(("MULTI", "EXEC")) for c in commands[begin + 1:end]), commands[begin:end + 1]
    block = commands[begin + 1:end]
    assert any(c.startswith("HSET") and keys.job in c for c in block)
    assert any(c.startswith("EXPIRE") and keys.job in c for c in block)
    assert any(c.startswith("RPUSH") and keys.done in c for c in block)
    assert any(c.startswith("EXPIRE") and keys.done in c for c in block)


# ---------------------------------------------------------------------------------- forged and garbage tasks


@pytest.mark.parametrize("real_task", [True, False], ids=["beside-the-real-task", "instead-of-the-real-task"])
@pytest.mark.parametrize("forged_activity", ["evil", "good"])
def test_a_forged_record_on_the_broker_cannot_change_what_runs(harness, tasks, caplog, forged_activity,
                                                                real_task) -> None:
    """A task for a real call whose record names another activity (or the same one) and another output path:
    the stored call runs, writes where it was stored to write, and the other handler never runs. Either beside
    the call's real task (whichever runs first runs the stored call, the other finds it finished), or with the
    real task taken off the broker so the forged one is certainly the one that claims the call. A forged task of
    another activity ("evil") leaves the call to its own task (see test_forged_elsewhere.py), which is put back
    on its queue once the forged one ended."""
    caplog.set_level(logging.WARNING)
    ran: dict[str, list] = {"good": [], "evil": []}
    harness.tools.register("good", TOOLS["good"])
    harness.tools.register("evil", TOOLS["evil"])

    def good(call: dict) -> str:
        ran["good"].append(call)
        return "stored call"

    def evil(call: dict) -> str:
        ran["evil"].append(call)
        return "forged call"

    harness.activities.register("good", good)
    harness.activities.register("evil", evil)
    client = harness.client()
    publish(client)
    store = store_of(client)
    # the activities are live (a worker announced them, and has since stopped), so the call is an explicit one
    routing = Routing.from_settings(harness.settings)
    RedisFleet(store).announce_worker("earlier-worker", WorkerAnnouncement("earlier-worker", activities=tuple(
        routing.announcement(spec) for spec in harness.activities.specs())), ttl_s=60)
    handle = client.submit({"calls": [{"_tool": "good", "_outputPath": "†state.ok"}]})
    (call_id, stored), = store.call_records(handle.id).items()
    stored_json = store.redis.hget(JobKeys(client.settings.namespace, handle.id).calls, call_id)
    assert stored.mode.value == "explicit" and stored.queue == "agentq.activity.good"
    taken = None
    if not real_task:
        assert store.redis.llen(stored.queue) == 1
        taken = store.redis.lpop(stored.queue)
    forged = stored.to_dict()
    forged.update(activity=forged_activity, tool=forged_activity, task=f"agentq.activity.{forged_activity}",
                  queue=f"agentq.activity.{forged_activity}",
                  call={**forged["call"], "_tool": forged_activity, "_outputPath": "†state.hijacked"})
    sender(harness).send_task(f"agentq.activity.{forged_activity}", args=[handle.id, call_id, forged],
                              queue=f"agentq.activity.{forged_activity}", task_id="forged")

    start_worker(harness)
    if taken is not None and forged_activity == "evil":
        assert tasks.wait("forged") == {"forged": "elsewhere"}
        assert warnings_about(caplog, "left to its own task")
        store.redis.rpush(stored.queue, taken)
    record = handle.result(timeout=20)
    if real_task:
        outcomes = tasks.wait("forged", task_id(handle.id, call_id))
        other = "finished" if forged_activity == "good" else outcomes["forged"]
        assert other in ("finished", "elsewhere")
        assert sorted(outcomes.values()) == sorted(["done", other]), outcomes  # the call ran exactly once
    elif forged_activity == "good":
        assert tasks.wait("forged") == {"forged": "done"}
        assert warnings_about(caplog, "the task's record differs from the stored one; running the stored call")
    assert record["status"] == "succeeded", (record, [e.data for e in handle.events()])
    assert record["state"] == {"ok": "stored call"}
    assert ran["evil"] == [] and len(ran["good"]) == 1
    assert ran["good"][0]["_outputPath"] == "†state.ok"
    assert store.redis.hget(JobKeys(client.settings.namespace, handle.id).calls, call_id) == stored_json
    assert "hijacked" not in json.dumps(store.read_log(handle.id))
    no_tracebacks(caplog)


GARBAGE = [
    ("agentq.activity.good", [{"x": 1}], {}),
    ("agentq.activity.good", [], {}),
    ("agentq.activity.good", ["job ok", 5], {}),
    ("agentq.activity.good", ["}lead", "call_1", {"id": "call_1"}], {}),
    ("agentq.activity.good", [], {"job": [1, 2]}),
    ("agentq.engine.tick", [{"x": 1}], {}),
    ("agentq.engine.tick", ["a b"], {}),
]


def test_tasks_with_garbage_arguments_are_one_warning_each(harness, tasks, caplog):
    caplog.set_level(logging.WARNING)
    harness.tools.register("good", TOOLS["good"])
    harness.activities.register("good", lambda call: "ok")
    start_worker(harness)
    client = harness.client()
    app = sender(harness)
    ids = []
    for n, (name, args, kwargs) in enumerate(GARBAGE):
        queue = "agentq.activity.good" if name.startswith("agentq.activity.") else "agentq.engine"
        app.send_task(name, args=args, kwargs=kwargs, queue=queue, task_id=f"garbage-{n}")
        ids.append(f"garbage-{n}")
    results = tasks.wait(*ids)
    assert [results[i] for i in ids[:5]] == ["ignored"] * 5
    assert job_keys(client) == []
    lines = [line for line in warnings_about(caplog, "ignored: its arguments do not")]
    assert len(lines) == len(GARBAGE), lines
    no_tracebacks(caplog)
    # the worker keeps serving
    record = client.submit({"calls": [{"_tool": "good", "_outputPath": "†state.ok"}]}).result(timeout=20)
    assert record["status"] == "succeeded" and record["state"] == {"ok": "ok"}


def test_a_task_pointing_at_no_job_writes_nothing(harness, tasks, caplog):
    caplog.set_level(logging.WARNING)
    harness.tools.register("good", TOOLS["good"])
    harness.activities.register("good", lambda call: "ok")
    start_worker(harness)
    client = harness.client()
    sender(harness).send_task("agentq.activity.good", args=["job_nope", "call_1", {"id": "call_1"}],
                              queue="agentq.activity.good", task_id="nowhere")
    assert tasks.wait("nowhere") == {"nowhere": "missing"}
    assert job_keys(client) == []
    no_tracebacks(caplog)


# ------------------------------------------------------------------------------------- results and timeouts


def test_a_result_over_the_limit_fails_the_call_and_never_reaches_redis(harness):
    size = 2_000_000
    harness.tools.register("big", tool_schema("big"))
    harness.activities.register("big", lambda call: "x" * size)
    start_worker(harness)  # AGENTQ_MAX_RESULT_BYTES at its default, 1 MB
    assert harness.settings.max_result_bytes == 1_000_000
    client = harness.client()
    redis = store_of(client).redis
    before = redis.info("memory")["used_memory"]
    handle = client.submit({"calls": [{"_tool": "big", "_outputPath": "†state.blob"}]})
    record = handle.result(timeout=20)
    grown = redis.info("memory")["used_memory"] - before

    assert record["status"] == "failed", record
    assert record["error"]["type"] == "CallsFailed"
    assert "ResultTooLarge" in record["error"]["message"]
    assert "the limit is 1000000 (AGENTQ_MAX_RESULT_BYTES)" in record["error"]["message"]
    assert "blob" not in record["state"]
    finished = [e.data for e in handle.events() if e.event == "call.finished"]
    assert [e["error"]["type"] for e in finished] == ["ResultTooLarge"]
    assert f"the activity's result is {size + 2} bytes of JSON" in finished[0]["error"]["message"]
    log_text = json.dumps(store_of(client).read_log(handle.id))
    assert len(log_text) < 10_000 and "xxxxxxxxxx" not in log_text
    events_text = json.dumps([e.data for e in handle.events(technical=True)])
    assert len(events_text) < 20_000 and "xxxxxxxxxx" not in events_text
    assert grown < size // 4, f"Redis memory grew by {grown} bytes for a {size} byte result"


def test_an_activity_without_a_timeout_gets_the_default(harness):
    """`AGENTQ_DEFAULT_TIMEOUT_S` applies to an activity that declares no timeout: an async handler that would
    sleep 60 s fails after 1 s, naming the limit. An activity with its own, longer timeout is not cut short.

    Known limit: in a threads pool nothing can interrupt a *sync* handler, so one that overruns is only checked
    after it returns (its late result is discarded and the call fails the same way); Celery's hard time limit
    needs the prefork pool."""
    harness.tools.register("hang", tool_schema("hang"))
    harness.tools.register("patient", tool_schema("patient"))

    async def hang(call):
        await asyncio.sleep(60)
        return "never"

    async def patient(call):
        await asyncio.sleep(1.5)
        return "waited"

    harness.activities.register("hang", hang)
    harness.activities.register("patient", patient, timeout=10)
    start_worker(harness, default_timeout_s=1.0)
    client = harness.client()
    handle = client.submit({"calls": [{"_tool": "hang", "_outputPath": "†state.hung"},
                                      {"_tool": "patient", "_outputPath": "†state.patient"}]})
    record = handle.result(timeout=30)  # within the 60 s the hanging call would take
    assert record["status"] == "failed", record
    assert "timed out after 1.0 s" in record["error"]["message"]
    assert record["state"] == {"patient": "waited"}
    errors = {e.data["tool"]: e.data.get("error") for e in handle.events() if e.event == "call.finished"}
    assert errors["patient"] is None
    assert errors["hang"]["message"] == "timed out after 1.0 s"


def test_a_sync_handler_that_overruns_the_default_timeout_fails_once_it_returns(harness):
    harness.tools.register("slow", tool_schema("slow"))
    harness.activities.register("slow", lambda call: time.sleep(1.5) or "late")
    start_worker(harness, default_timeout_s=0.5)
    record = harness.client().submit({"calls": [{"_tool": "slow", "_outputPath": "†state.slow"}]}).result(timeout=20)
    assert record["status"] == "failed", record
    assert "timed out after 0.5 s" in record["error"]["message"]
    assert record["state"] == {}


# ----------------------------------------------------------------------------------------------- unknown tools


def test_an_unknown_tool_names_the_published_tools(harness):
    harness.tools.register("good", TOOLS["good"])
    harness.tools.register("evil", TOOLS["evil"])
    harness.activities.register("good", lambda call: "ok")
    harness.activities.register("evil", lambda call: "ok")
    start_worker(harness)  # publishes its tools
    client = harness.client()
    with pytest.raises(JobValidationError) as caught:
        client.submit({"calls": [{"_tool": "nope"}]})
    message = str(caught.value)
    # the published names, then the built-in wait tools
    assert "unknown tool 'nope'" in message, message
    assert "(registered: evil, good, sleep, waitForEvent, waitForSignal)" in message, message
    assert "no worker has published" not in message
    assert [p.pointer for p in caught.value.problems] == ["/calls/0/_tool"]
    assert_nothing_written(client)


def test_an_unknown_tool_with_nothing_published_says_so(harness):
    client = harness.client()
    with pytest.raises(JobValidationError) as caught:
        client.submit({"calls": [{"_tool": "nope"}]})
    assert "unknown tool 'nope'" in str(caught.value)
    assert_nothing_written(client)


def test_settings_reject_a_depth_limit_that_cannot_hold_a_job():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Settings(max_depth=1)
