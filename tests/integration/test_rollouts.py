"""Safe rollouts (docs/rollouts.md) with real Redis and separate `agentq worker` processes serving versions of an
activity (tests/integration/rollout_activities.py): a share of a thousand calls goes to version 2 and runs there,
a retried call keeps its route, a tenant route, a route without a known worker, and the report's figures match
the calls. The test process imports no activity code: it submits through a `Client` that knows only what the
workers published. (A route to the model runs in-process with the fake Messages API: test_rollouts_latent.py.)"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentq.client import Client
from agentq.protocol.records import CallMode, WorkerAnnouncement
from agentq.store.fleet import RedisFleet
from tests.integration.conftest import store_of
from tests.integration.procs import WorkerProc, WorkerProcs, cli, wait_for

pytestmark = pytest.mark.timeout(240)

MODULE = "tests.integration.rollout_activities"
V2_SECONDS = 0.03  # rollout_activities.V2_SECONDS (not imported: the test process runs no activity code)


def _serve(worker_procs: WorkerProcs) -> tuple[WorkerProc, WorkerProc]:
    """One worker serving version 1 of sendEmail and flaky, one serving versions 1 and 2 of both."""
    old = worker_procs.start(module=MODULE, concurrency=8, ROLLOUT_VERSIONS="1")
    both = worker_procs.start(module=MODULE, concurrency=8, ROLLOUT_VERSIONS="1,2")
    worker_procs.wait_live(old, ["sendEmail", "flaky"])
    announced = worker_procs.wait_live(both, ["sendEmail", "sendEmail@2", "flaky", "flaky@2"])
    v2 = next(a for a in announced["activities"] if a["name"] == "sendEmail@2")
    assert (v2["activity"], v2["version"], v2["queue"]) == ("sendEmail", "2", "agentq.activity.sendEmail@2")
    return old, both


def _set(redis_url: str, tmp_path: Path, tool: str, rule: dict) -> str:
    path = tmp_path / f"{tool}.json"
    path.write_text(json.dumps(rule))
    done = cli(redis_url, "rollouts", "set", tool, str(path))
    assert done.returncode == 0 and done.stderr == "", done
    return done.stdout


def counted(client: Client, calls: dict[str, int]) -> dict:
    """The report once it counted `calls` (tool -> calls that ended): each call is counted right after its commit,
    so the last calls of a job that just ended may take a few more milliseconds."""

    def report() -> dict | None:
        tools = client.rollouts.report()["tools"]
        done = {tool: sum(row["calls"] for row in tools.get(tool, {}).get("routes", [])) for tool in calls}
        return tools if done == calls else None

    return wait_for(report, 10, f"the report to count {calls}")


def _emails(n: int, prefix: str = "u") -> dict:
    return {"calls": [{"_tool": "sendEmail", "to": f"{prefix}{i}", "_outputPath": f"†state.r{i}"} for i in range(n)]}


def test_a_tenth_of_a_thousand_calls_runs_on_version_2_and_the_report_matches(worker_procs, redis_url, tmp_path):
    old, both = _serve(worker_procs)
    said = _set(redis_url, tmp_path, "sendEmail", {"routes": [{"to": "sendEmail@2", "share": 0.1}]})
    assert said == "rollout rule for sendEmail set: 10% sendEmail@2; the rest as usual\n"

    with Client(redis_url) as client:
        handle = client.submit(_emails(1000))
        record = handle.result(timeout=180)
        assert record["status"] == "succeeded", record["error"]
        records = list(store_of(client).call_records(handle.id).values())
        report = counted(client, {"sendEmail": 1000})["sendEmail"]

    by_route = Counter(r.route for r in records)
    print(f"\nshare routed to sendEmail@2: {by_route['sendEmail@2']} of 1000 calls")
    assert 80 <= by_route["sendEmail@2"] <= 120 and by_route["*"] == 1000 - by_route["sendEmail@2"], by_route
    for r in records:
        result = record["state"][f"r{r.index}"]
        if r.route == "sendEmail@2":
            assert (r.activity, r.task, r.queue) == ("sendEmail@2", "agentq.activity.sendEmail@2",
                                                     "agentq.activity.sendEmail@2")
            assert (result["version"], result["pid"]) == ("2", both.pid)  # only that worker serves version 2
        else:
            assert (r.activity, r.queue, result["version"]) == ("sendEmail", "agentq.activity.sendEmail", "1")
    assert {record["state"][f"r{r.index}"]["pid"] for r in records if r.route == "*"} <= {old.pid, both.pid}
    runs = worker_procs.store.redis
    assert int(runs.get("rollout:runs:sendEmail:2")) == by_route["sendEmail@2"]
    assert int(runs.get("rollout:runs:sendEmail:1")) == by_route["*"]

    assert report["rule"] == {"routes": [{"to": "sendEmail@2", "share": 0.1}]}
    rows = {row["route"]: row for row in report["routes"]}
    assert list(rows) == ["sendEmail@2", "*"]
    for route, n in by_route.items():
        assert (rows[route]["calls"], rows[route]["done"], rows[route]["failed"], rows[route]["success_rate"],
                rows[route]["cost_usd"]) == (n, n, 0, 1.0, 0.0)
    assert V2_SECONDS * 0.99 <= rows["sendEmail@2"]["p50_s"] <= rows["sendEmail@2"]["p95_s"] < 5
    assert rows["*"]["p50_s"] < V2_SECONDS <= rows["sendEmail@2"]["p50_s"]

    shown = cli(redis_url, "rollouts")
    assert shown.returncode == 0, shown.stderr
    header, first, second = shown.stdout.splitlines()
    assert header.split() == ["TOOL", "ROUTE", "CALLS", "SUCCESS", "P50", "P95", "COST", "RULE"]
    assert first.split()[:4] == ["sendEmail", "sendEmail@2", str(by_route["sendEmail@2"]), "100.0%"]
    assert second.split()[:4] == ["sendEmail", "(usual)", str(by_route["*"]), "100.0%"]
    assert json.loads(cli(redis_url, "rollouts", "--json").stdout)["tools"]["sendEmail"] == report


def test_a_retried_call_keeps_its_route_and_failures_count_in_the_success_rate(worker_procs, redis_url, tmp_path):
    _serve(worker_procs)
    _set(redis_url, tmp_path, "flaky", {"routes": [{"to": "flaky@2", "share": 0.5}]})
    _set(redis_url, tmp_path, "sendEmail", {"routes": [{"to": "sendEmail@2", "share": 0.5}]})
    flaky = {"calls": [{"_tool": "flaky", "tag": f"t{i}", "_outputPath": f"†state.f{i}"} for i in range(30)]}
    failing = {"calls": [{"_tool": "sendEmail", "to": f"fail{i}", "_outputPath": f"†state.r{i}"}
                         for i in range(20)]}
    with Client(redis_url) as client:
        handle = client.submit(flaky)
        assert handle.result(timeout=120)["status"] == "succeeded"
        records = list(store_of(client).call_records(handle.id).values())
        failed = client.submit(failing)
        assert failed.result(timeout=120)["status"] == "failed"
        failed_records = list(store_of(client).call_records(failed.id).values())
        report = counted(client, {"flaky": 30, "sendEmail": 20})

    redis = worker_procs.store.redis
    routes = Counter(r.route for r in records)
    assert set(routes) == {"flaky@2", "*"}, routes  # 30 calls at 50%: both routes taken
    for r in records:
        version = "2" if r.route == "flaky@2" else "1"
        assert redis.lrange(f"rollout:flaky:{r.call['tag']}", 0, -1) == [version, version]  # both attempts
    rows = {row["route"]: row for row in report["flaky"]["routes"]}
    for route, n in routes.items():
        assert (rows[route]["calls"], rows[route]["retries"], rows[route]["success_rate"]) == (n, n, 1.0)

    failed_routes = Counter(r.route for r in failed_records)
    rows = {row["route"]: row for row in report["sendEmail"]["routes"]}
    assert sum(row["calls"] for row in rows.values()) == 20
    for route, n in failed_routes.items():
        assert (rows[route]["calls"], rows[route]["failed"], rows[route]["success_rate"]) == (n, n, 0.0)


def test_a_tenant_route_and_a_route_without_a_known_worker(worker_procs, redis_url, tmp_path):
    _serve(worker_procs)
    store = worker_procs.store
    # version 3 was served once: the rule may name it while it is known
    gone = {"name": "sendEmail@3", "activity": "sendEmail", "version": "3", "task": "agentq.activity.sendEmail@3",
            "queue": "agentq.activity.sendEmail@3"}
    RedisFleet(store).announce_worker("host:9:gone", WorkerAnnouncement("host:9:gone", activities=(gone,)), ttl_s=60)
    RedisFleet(store).retire_worker("host:9:gone")
    _set(redis_url, tmp_path, "sendEmail", {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]},
                                                       {"to": "sendEmail@3", "share": 1.0}]})
    forgot = cli(redis_url, "activities", "forget", "sendEmail@3")
    assert forgot.returncode == 0, forgot

    with Client(redis_url, tenant="acme") as acme, Client(redis_url) as other:
        mine = acme.submit(_emails(20))
        theirs = other.submit(_emails(20))
        assert mine.result(timeout=60)["status"] == theirs.result(timeout=60)["status"] == "succeeded"
        acme_records = store_of(acme).call_records(mine.id).values()
        other_records = store_of(other).call_records(theirs.id).values()
        assert {(r.route, r.activity, r.mode) for r in acme_records} == {
            ("sendEmail@2", "sendEmail@2", CallMode.EXPLICIT)}
        # sendEmail@3 is no longer known: never chosen, the calls follow the usual resolution
        assert {(r.route, r.activity) for r in other_records} == {("*", "sendEmail")}
        assert {v["version"] for v in theirs.result(timeout=5)["state"].values()} == {"1"}
        rows = {row["route"]: row["calls"] for row in counted(acme, {"sendEmail": 40})["sendEmail"]["routes"]}
    assert rows == {"sendEmail@2": 20, "sendEmail@3": 0, "*": 20}
