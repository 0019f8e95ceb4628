"""What only the Redis store can show: how many round trips its steps take, how it recovers from a Redis that
lost its scripts, how its event stream is stored and how many bytes a job keeps. (The behaviour both stores
share is in `test_store_contract.py`.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentq.engine.relay import relay_events
from agentq.protocol.digests import dumps
from agentq.protocol.envelopes import Envelope, JobQueued
from agentq.protocol.events import activity_part, text_part
from agentq.protocol.status import JobStatus
from agentq.store import call_scripts, scripts, submission
from agentq.store import events as event_steps
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.redis_trips import RoundTrips
from tests.runtime.clock import ManualClock
from tests.runtime.conftest import Rig, make_plan, records_of, tool_schema

TOOLS = {"first": tool_schema("first", {"x": {"type": "number"}})}
JOB = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]}


@pytest.fixture
def store(redis_url: str) -> Iterator[StateStore]:
    store = StateStore(redis_url)
    yield store
    store.close()


def create(store: StateStore, job_id: str, tenant: str = "default") -> bool:
    plan = make_plan(JOB, TOOLS, job_id=job_id)
    return store.create_job(plan, records_of(plan), submitted=JOB,
                            events=[JobQueued(job_id=plan.id, kind="plan", calls=1)], tenant=tenant)


def test_a_submission_is_one_round_trip_with_its_listing(redis_store: StateStore, clock: ManualClock):
    store = redis_store
    assert create(store, "job_zero")  # a Redis that never ran the script loads it first (NOSCRIPT, see below)
    clock.advance(0.001)
    trips = RoundTrips(store.redis)
    assert create(store, "job_one")
    # the job's script, which lists the job and enters it among the active jobs (metrics) itself; the listings'
    # trims went with job_zero's
    assert trips.requests == [["EVALSHA"]]
    assert store.redis.zscore(store.fleet.active_jobs, "job_one") is not None
    listed_at = store.redis.zscore(store.fleet.jobs, "job_one")

    trips.take()
    assert not create(store, "job_one")  # the id is taken: nothing written, its listing unchanged
    assert len(trips.requests) == 1
    assert store.redis.zscore(store.fleet.jobs, "job_one") == listed_at
    assert store.recent_jobs() == ["job_one", "job_zero"]


def test_a_named_tenants_job_is_listed_for_its_tenant_too_in_the_same_round_trip(
        redis_store: StateStore, clock: ManualClock):
    store = redis_store
    assert create(store, "job_zero")
    clock.advance(0.001)
    trips = RoundTrips(store.redis)
    assert create(store, "job_acme", tenant="acme")
    # the script lists it for its tenant too; the tenant's listing is trimmed with its first job here (the fleet's
    # two were, with job_zero's)
    assert trips.requests == [["EVALSHA", "ZREMRANGEBYSCORE"]]
    assert store.recent_jobs(tenant="acme") == ["job_acme"]
    assert store.recent_jobs() == ["job_acme", "job_zero"]  # the default tenant's are among every tenant's
    assert (store.record("job_acme").tenant, store.record("job_zero").tenant) == ("acme", "default")
    assert store.job_info("job_acme").tenant == "acme"
    trips.take()
    assert not create(store, "job_acme", tenant="globex")  # a refused id leaves no listing behind
    assert store.recent_jobs(tenant="globex") == []


def test_a_redis_that_lost_its_scripts_still_takes_a_submission(store: StateStore):
    store.redis.script_flush()
    trips = RoundTrips(store.redis)
    assert create(store, "job_after_flush")
    assert [request[0] for request in trips.requests] == ["EVALSHA", "EVALSHA", "SCRIPT LOAD", "EVALSHA"]
    assert store.job_status("job_after_flush").value == "queued"
    assert store.recent_jobs() == ["job_after_flush"]


def test_a_call_step_is_one_evalsha_and_the_store_keeps_the_jobs_keys(store: StateStore):
    """A claim and a commit are one request each (EVALSHA, as redis-py's `Script` sends it, without its layers),
    and the store builds and checks a job's key names once, not in each step."""
    from agentq.protocol.status import CallStatus
    from agentq.store.keys import JobKeys

    assert create(store, "job_keys")
    keys = store.keys("job_keys")
    assert store.keys("job_keys") is keys and keys == JobKeys(store.namespace, "job_keys")
    assert keys.lease("call_x") == f"{keys.leases}call_x" and keys.job is keys.job
    call_id = next(iter(store.call_records("job_keys")))
    for script in store.scripts.registered.values():  # loaded now (a test before may have flushed them)
        store.redis.script_load(script.script)
    trips = RoundTrips(store.redis)
    assert store.claim("job_keys", call_id, token="t", lease_ms=10_000).outcome.value == "claimed"
    assert store.commit("job_keys", call_id, token="t", status=CallStatus.DONE).outcome.value == "committed"
    assert trips.requests == [["EVALSHA"], ["EVALSHA"]]


def test_a_commit_that_knows_its_call_is_awaited_does_not_read_the_call_again(store: StateStore):
    """Redis commands a call's steps run, Lua's included (INFO commandstats): a claim 8 (its plan job started already,
    so its attempts hash has its expiry; no start events to publish, a first attempt: no lost attempts to read, no
    log asked for), a commit (no
    messages, no events; no call of the job waits on another, so no dependents are read; its lease read and ended
    in one command) 6 when its caller passes the stored record's `awaited` (the claim gave the record), 7 when it
    reads and decodes the stored record itself."""
    from agentq.protocol.status import CallStatus

    job = {"calls": [{"_tool": "first", "x": i, "_outputPath": f"†state.a{i}"} for i in range(3)]}
    plan = make_plan(job, TOOLS, job_id="job_counted")
    assert store.create_job(plan, records_of(plan), submitted=job, events=[])
    first, second, third = store.call_records("job_counted")
    for script in store.scripts.registered.values():
        store.redis.script_load(script.script)

    def commands(step: Any) -> int:
        store.redis.config_resetstat()
        step()
        stats = store.redis.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_config|resetstat")

    def claim(call_id: str) -> None:
        assert store.claim("job_counted", call_id, token=call_id, lease_ms=10_000).outcome.value == "claimed"

    def commit(call_id: str, awaited: bool | None) -> None:
        assert store.commit("job_counted", call_id, token=call_id, status=CallStatus.DONE, messages=[],
                            awaited=awaited).outcome.value == "committed"

    claim(first)
    assert commands(lambda: claim(second)) == 8
    claim(third)
    assert commands(lambda: commit(second, True)) == 6
    assert commands(lambda: commit(first, None)) == 7
    assert store.job_info("job_counted").open_calls == 1  # each commit counted its call out once
    commit(third, True)
    assert store.job_info("job_counted").open_calls == 0


def test_old_listings_are_trimmed_by_the_next_submission(store: StateStore):
    store.redis.zadd(store.fleet.jobs, {"job_ancient": 1.0})
    assert create(store, "job_new")
    assert store.recent_jobs() == ["job_new"]


def test_only_calls_that_wait_have_a_waiting_count(store: StateStore):
    """A job of independent calls stores no waiting count per call (bytes per call)."""
    job = {"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"},
                     {"_tool": "first", "x": "†state.a", "_outputPath": "†state.b"},
                     {"_tool": "first", "x": 2, "_outputPath": "†state.c"}]}
    plan = make_plan(job, TOOLS, job_id="job_waits")
    assert store.create_job(plan, records_of(plan), submitted=job, events=[])
    second = plan.calls[1].id
    assert store.redis.hgetall(store.keys(plan.id).waiting) == {second: "1"}


def test_a_one_call_submission_gives_an_expiry_only_to_the_keys_it_wrote(store: StateStore):
    """submit.lua of a one-call job without context: the job, its spec, calls, statuses, tools and events are
    written (one command each, and the check that the id is free) and get the job's expiry; the log, waiting
    counts, attempts, dependents, exchanges, approvals and lost attempts are not written, and get no PEXPIREAT."""
    assert create(store, "job_counted_zero")  # the script is loaded
    before = store.redis.info("commandstats")
    assert create(store, "job_counted_one")
    after = store.redis.info("commandstats")
    commands = {name.removeprefix("cmdstat_"): after[name]["calls"] - before.get(name, {"calls": 0})["calls"]
                for name in after}
    commands = {name: n for name, n in commands.items() if n and name != "info"}
    # (the listings' trims went with job_counted_zero's: at most one a second)
    assert commands == {"evalsha": 1, "exists": 1, "hset": 5, "xadd": 1, "pexpireat": 6, "zadd": 2}, commands
    keys = store.keys("job_counted_one")
    written = [key for key in keys.all if store.redis.exists(key)]
    assert {store.redis.pexpiretime(key) for key in written} == {int(store.redis.hget(keys.job, "expire_at_ms"))}


def test_a_large_job_is_written_whole_in_a_few_commands_and_every_key_expires_with_it(store: StateStore):
    """submit.lua writes each hash and the log with multi-field commands (up to 1000 fields each): a job of 2,500
    calls, each with a dependent, takes a few dozen commands inside the script, and each key it wrote gets the job's
    expiry."""
    calls = [{"_tool": "first", "x": i, "_outputPath": f"†state.r{i}"} for i in range(2500)]
    calls += [{"_tool": "first", "x": f"†state.r{i}", "_outputPath": f"†out.o{i}"} for i in range(2500)]
    job = {"context": [{"type": "input", "data": {"n": i}, "_instance": f"i{i}"} for i in range(1500)],
           "calls": calls}
    plan = make_plan(job, TOOLS, job_id="job_large")
    before = store.redis.info("commandstats")
    assert store.create_job(plan, records_of(plan), submitted=job, events=[])
    after = store.redis.info("commandstats")
    commands = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"] for name in after}
    assert sum(commands.values()) < 60, commands  # one per field would be over 17,500
    keys = store.keys(plan.id)
    assert store.redis.hlen(keys.calls) == store.redis.hlen(keys.status) == 5000
    assert store.redis.hlen(keys.waiting) == store.redis.hlen(keys.dependents) == 2500
    assert store.redis.llen(keys.log) == 1500
    assert store.redis.hget(keys.job, "open") == "5000"
    written = [key for key in keys.all if store.redis.exists(key)]
    assert len(written) == 8  # the job, spec, log, calls, status, waiting, dependents and tools; no events given
    assert {store.redis.pexpiretime(key) for key in written} == {int(store.redis.hget(keys.job, "expire_at_ms"))}


# ------------------------------------------------------------------------------------------- event stream


def test_the_events_read_are_the_envelopes_the_workers_built(store: StateStore, monkeypatch: pytest.MonkeyPatch):
    """Entries are stored packed (`store/event_codec.py`); every reader gets the envelopes exactly as built."""
    built: list[dict] = []
    original = scripts.entry

    def recording(envelope: Envelope, job_id: str) -> str:
        built.append(envelope.to_dict())
        return original(envelope, job_id)

    for encoder in (scripts, call_scripts, event_steps, submission):  # every module packing an envelope for the stream
        monkeypatch.setattr(encoder, "entry", recording)
    rig = Rig(store)
    flaky_runs: list[int] = []

    def flaky(call: dict) -> str:
        flaky_runs.append(1)
        if len(flaky_runs) == 1:
            raise RuntimeError("not yet")
        return "ok at last"

    def chatty(call: dict, tool: dict, context: Any) -> list:
        context.emit(text_part("Here is the chart."))
        context.emit({"activity_type": "chart_generation", "content": "bars",
                      "display_info": {"friendly_name": "Graphique barres"}})
        return [1, "deux", {"trois": 3.0}]

    def broken(call: dict) -> None:
        raise ValueError(f"cannot read card {call['card']}")

    rig.tools.register("weather", {**tool_schema("weather", {"city": {"type": "string"}}),
                                   "x-display": {"friendly_name": "Météo", "icon": "🌦️"}})
    rig.activities.register("weather", lambda call: {"city": call["city"], "temp": 18, "sky": "nuageux ☁️"})
    rig.tools.register("card", {**tool_schema("card", {"card": {"type": "string"}}), "x-sensitive": ["/card"]})
    rig.activities.register("card", broken)
    rig.activity("flaky", flaky, retries=1, retry_backoff=0.001)
    rig.tools.register("chatty", tool_schema("chatty"))
    rig.activities.register("chatty", chatty)
    job_id = rig.submit({"options": {"locale": "fr"}, "calls": [
        {"_tool": "weather", "city": "Zürich", "_reasoningForCall": "Il me faut la météo.", "_outputPath": "†state.w"},
        {"_tool": "flaky", "_outputPath": "†state.f"},
        {"_tool": "chatty", "_outputPath": "†state.c"},
        {"_tool": "card", "card": "4111 1111 1111 1111", "_outputPath": "†state.x || †state.failed"}]})
    assert sorted(rig.drain()) == ["done", "done", "done", "failed", "retry"]
    rig.executor.leases.stop()
    read = [json.dumps(envelope, ensure_ascii=False) for _, envelope in store.read_events(job_id)]
    # each one exactly as built (values, JSON types, key order), in order; some built were not published (a claim
    # publishes `job.started` only if it starts the job)
    published = iter(json.dumps(envelope, ensure_ascii=False) for envelope in built)
    assert all(any(envelope == candidate for candidate in published) for envelope in read)
    events = [json.loads(envelope)["event"] for envelope in read]
    assert (events[0], events[-1], events.count("call.finished"), events.count("part")) == (
        "job.queued", "job.finished", 4, 2)
    assert {"call.retrying", "thought", "job.started"} <= set(events)
    # the whole number, spaces included: a timestamp's microseconds may hold "4111" by chance
    assert "4111 1111 1111 1111" not in json.dumps(read, ensure_ascii=False)
    stream = store.redis.xrange(store.keys(job_id).events)
    assert all(fields["e"].startswith('{"~":') for _, fields in stream)  # every one of them stored packed


def test_a_child_jobs_events_are_relayed_packed_and_read_back_whole(store: StateStore):
    rig = Rig(store)
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}})
    parent = rig.submit({"calls": [{"_tool": "noop", "i": 0, "_outputPath": "†state.r"}]})
    child = rig.submit({"calls": [{"_tool": "noop", "i": 1, "_outputPath": "†state.r"}]})
    rig.drain()
    rig.executor.leases.stop()
    store.redis.hset(store.keys(child).job, "parent", json.dumps({"job": parent, "module": "maps"}))
    child_calls = [e for _, e in store.read_events(child) if e["event"].startswith("call.")]
    assert relay_events(store, child) == len(child_calls) == 2
    relayed = [e for _, e in store.read_events(parent) if e.get("relayed_from")]
    assert relayed == [{**e, "part": {**e["part"], "source": "maps"}, "relayed_from": child} for e in child_calls]


def test_an_event_stored_whole_by_an_older_agentq_reads_as_it_is(store: StateStore):
    """Jobs live across upgrades: entries written before entries were packed are full envelopes."""
    plan = make_plan(JOB, TOOLS, job_id="job_old")
    assert store.create_job(plan, records_of(plan), submitted=JOB, events=[])
    old = JobQueued(job_id="job_old", kind="plan", calls=1, part=activity_part("Job queued", source="agentq"))
    store.redis.xadd(store.keys("job_old").events, {"e": dumps(old.to_dict())})
    store.add_events("job_old", [old])
    (_, whole), (_, packed) = store.read_events("job_old")
    assert whole == packed == old.to_dict()


def test_a_plan_job_stores_at_most_1600_bytes_per_call(store: StateStore):
    """Lean in Redis: a 400-call plan job (no-op activity, each call writing its own output path, as
    `benchmarks/throughput.py`'s (g)) keeps at most 1,600 bytes per call in Redis (`MEMORY USAGE key SAMPLES 0`
    over every key of the job), its event stream (two events per call) at most 750."""
    calls = 400
    rig = Rig(store)
    rig.activity("noop", lambda call: call["i"], {"i": {"type": "integer"}})
    job_id = rig.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(calls)]})
    assert rig.drain(limit=2 * calls) == ["done"] * calls
    rig.executor.leases.stop()
    assert store.job_status(job_id) is JobStatus.SUCCEEDED
    sizes = {key.rsplit(":", 1)[-1]: int(store.redis.memory_usage(key, samples=0) or 0)
             for key in store.redis.scan_iter(match=f"agentq:{{{job_id}}}:*")}
    assert sizes["events"] / calls <= 750, sizes
    assert sum(sizes.values()) / calls <= 1600, sizes


def test_a_budget_is_one_round_trip_per_step_and_expires_with_its_job(store: StateStore):
    from agentq.protocol.budgets import Budget, BudgetAsk, Spend
    from agentq.store.replies import BudgetGranted

    assert create(store, "job_budget")
    keys = store.keys("job_budget")
    store.settle_budget("job_budget", "nothing", Spend())  # the script is loaded (a Redis that never ran it)
    trips = RoundTrips(store.redis)
    granted = store.reserve_budget("job_budget", "k", budget=Budget(max_requests=2),
                                   ask=BudgetAsk(500, 0, 1024, 256, 0.0))
    assert granted == BudgetGranted(1024)
    assert store.settle_budget("job_budget", "k", Spend(requests=1, input_tokens=480, output_tokens=99))
    assert [request[0] for request in trips.requests] == ["EVALSHA", "EVALSHA"]
    # the budget hash lives exactly as long as the job's keys
    assert abs(store.redis.pexpiretime(keys.budget) - store.redis.pexpiretime(keys.job)) <= 1
    assert store.redis.hgetall(keys.budget) == {
        "spent.requests": "1", "spent.input": "480", "spent.output": "99", "spent.cost": "0",
        "held.requests": "0", "held.input": "0", "held.output": "0", "held.cost": "0"}


def test_the_attempts_hash_expires_with_its_job_whichever_step_created_it(store: StateStore):
    """A plan job's attempts hash is created by the step that starts the job (its first claim or settle), which gives
    it the job's expiry; an agent job starts with its first tick, so the claim that creates its hash later checks
    for an expiry (PTTL) and gives it one."""
    from tests.runtime.test_store_contract_steps import add, agent, planned

    job_id = agent(store)
    store.begin_tick(job_id, exchanges=0, token="t", lease_ms=10_000)
    call, _ = planned("call_a")
    assert add(store, job_id, "t", (call, _)) == [call]
    assert store.claim(job_id, "call_a", token="c", lease_ms=10_000).outcome.value == "claimed"
    plan = make_plan(JOB, TOOLS, job_id="job_plan_attempts")
    assert store.create_job(plan, records_of(plan), submitted=JOB, events=[])
    assert store.claim(plan.id, plan.calls[0].id, token="c", lease_ms=10_000).outcome.value == "claimed"
    for each in (job_id, plan.id):
        keys = store.keys(each)
        assert store.redis.hget(keys.attempts, "call_a" if each == job_id else plan.calls[0].id) == "1"
        assert store.redis.pexpiretime(keys.attempts) == int(store.redis.hget(keys.job, "expire_at_ms")) > 0


def test_a_commit_reads_dependents_only_in_a_job_where_a_call_waits_on_another(store: StateStore):
    """submit.lua marks a job none of whose calls waits on another (`no_dependents`): its commits read no
    dependents. An agent tick that writes a call waiting on another removes the mark, so that call is released."""
    from agentq.protocol.status import CallStatus
    from agentq.store.replies import Committed
    from tests.runtime.test_store_contract_steps import add, agent, planned

    plan = make_plan(JOB, TOOLS, job_id="job_marked")
    assert store.create_job(plan, records_of(plan), submitted=JOB, events=[])
    assert store.redis.hget(store.keys(plan.id).job, "no_dependents") == "1"
    job_id = agent(store)
    assert store.redis.hget(store.keys(job_id).job, "no_dependents") == "1"
    store.begin_tick(job_id, exchanges=0, token="t", lease_ms=10_000)
    first = planned("call_a")
    assert add(store, job_id, "t", first) == [first[0]]
    assert store.redis.hget(store.keys(job_id).job, "no_dependents") == "1"  # call_a waits on nothing
    second = planned("call_b", "second", depends_on=("call_a",))
    assert add(store, job_id, "t", second) == []
    assert store.redis.hget(store.keys(job_id).job, "no_dependents") is None
    assert store.claim(job_id, "call_a", token="c", lease_ms=10_000).outcome.value == "claimed"
    committed = store.commit(job_id, "call_a", token="c", status=CallStatus.DONE, awaited=True)
    assert isinstance(committed, Committed) and [r.id for r in committed.released] == ["call_b"]


def test_reading_the_live_workers_is_two_round_trips(store: StateStore):
    """The trim of expired announcements and the listing of live workers go in one pipeline, then their
    announcements in a second; with no live worker, the first is all."""
    import time

    from agentq.protocol.records import WorkerAnnouncement

    trips = RoundTrips(store.redis)
    assert RedisFleet(store).live_workers() == []
    assert trips.take() == [["ZREMRANGEBYSCORE", "ZRANGEBYSCORE"]]
    RedisFleet(store).announce_worker("w1", WorkerAnnouncement("w1", activities=({"name": "fetch", "queue": "io"},)),
                                      ttl_s=60)
    store.redis.zadd(store.fleet.workers, {"w0": time.time() - 10})  # an announcement that expired
    trips.take()
    assert [w.id for w in RedisFleet(store).live_workers()] == ["w1"]
    assert trips.take() == [["ZREMRANGEBYSCORE", "ZRANGEBYSCORE"], ["GET"]]
    assert store.redis.zscore(store.fleet.workers, "w0") is None  # trimmed
