"""Rollout rules through the HTTP API and the `agentq` command (docs/rollouts.md): `PUT /v1/rollouts/{tool}` and `agentq
rollouts set TOOL FILE` check a rule against the tools and the known activity versions (every problem with its
JSON pointer and what exists; nothing written), `DELETE` / `clear` remove it, `GET /v1/rollouts` / `agentq
rollouts` report it; only admin tokens may use them. Worker processes drive the routes in
tests/integration/test_rollouts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentq.protocol.records import WorkerAnnouncement
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.integration.procs import cli

pytestmark = pytest.mark.timeout(120)

ADMIN, ACME = "admin-token-0123456789", "acme-token-0123456789"
V1 = {"name": "sendEmail", "activity": "sendEmail", "version": "1", "task": "agentq.activity.sendEmail",
      "queue": "agentq.activity.sendEmail"}
V2 = {"name": "sendEmail@2", "activity": "sendEmail", "version": "2", "task": "agentq.activity.sendEmail@2",
      "queue": "agentq.activity.sendEmail@2"}
BAD = {"routes": [{"to": "sendEmail@3", "share": 0.5}, {"to": "sendEmail@2", "tenants": []}]}
GOOD = {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]}, {"to": "", "share": 0.05}]}


@pytest.fixture
def fleet(harness, redis_url, tmp_path: Path):
    """sendEmail versions 1 and 2 announced by a live worker, its tool published; an API with an admin and a
    submit token."""
    harness.tool("sendEmail", params={"to": {"type": "string"}}, required=["to"])
    store = StateStore(redis_url)
    RedisFleet(store).publish_tools({"sendEmail": harness.tools.snapshot()["sendEmail"]}, publisher="test")
    RedisFleet(store).announce_worker("host:1:live", WorkerAnnouncement("host:1:live", activities=(V1, V2)), ttl_s=60)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"}}))
    yield f"@{tokens}"
    store.close()


def test_the_api_sets_reports_and_clears_rules_for_admins(fleet, serve_api):
    api = serve_api(tokens=[fleet])
    activities = api.request("GET", "/v1/activities", token=ACME).json()  # each version is listed with its workers
    assert {k: (v["activity"], v["version"], v["queue"], v["workers"]) for k, v in activities.items()} == {
        "sendEmail": ("sendEmail", "1", "agentq.activity.sendEmail", ["host:1:live"]),
        "sendEmail@2": ("sendEmail", "2", "agentq.activity.sendEmail@2", ["host:1:live"])}
    assert api.request("GET", "/v1/rollouts", token=ADMIN).json() == {"tools": {}}
    assert api.request("PUT", "/v1/rollouts/sendEmail", json_body=GOOD, token=ACME).status == 403
    assert api.request("GET", "/v1/rollouts", token=ACME).status == 403

    refused = api.request("PUT", "/v1/rollouts/sendEmail", json_body=BAD, token=ADMIN)
    assert refused.status == 422, refused.body
    assert refused.json()["error"]["problems"] == [
        {"pointer": "/routes/0/to", "message": "activity 'sendEmail' has no known version '3'; known versions: 1, 2"},
        {"pointer": "/routes/1/tenants", "message": "a non-empty list of tenant names is required"}]
    unknown = api.request("PUT", "/v1/rollouts/sendMail", json_body=GOOD, token=ADMIN)
    assert unknown.status == 422
    assert unknown.json()["error"]["problems"] == [
        {"pointer": "", "message": "unknown tool 'sendMail'; known tools: sendEmail"}]
    assert api.request("PUT", "/v1/rollouts/sendEmail", body=b"{", token=ADMIN).status == 400
    assert api.request("GET", "/v1/rollouts", token=ADMIN).json() == {"tools": {}}  # nothing was written

    stored = api.request("PUT", "/v1/rollouts/sendEmail", json_body=GOOD, token=ADMIN)
    assert stored.status == 200 and stored.json() == {"tool": "sendEmail", **GOOD}
    report = api.request("GET", "/v1/rollouts", token=ADMIN).json()["tools"]["sendEmail"]
    assert report["rule"] == GOOD
    assert [(r["route"], r["calls"], r["success_rate"], r["p50_s"]) for r in report["routes"]] == [
        ("sendEmail@2", 0, None, None), ("", 0, None, None), ("*", 0, None, None)]

    assert api.request("DELETE", "/v1/rollouts/sendEmail", token=ACME).status == 403
    assert api.request("DELETE", "/v1/rollouts/sendEmail", token=ADMIN).status == 204
    assert api.request("DELETE", "/v1/rollouts/sendEmail", token=ADMIN).status == 404
    assert api.request("GET", "/v1/rollouts", token=ADMIN).json() == {"tools": {}}


def test_the_cli_sets_reports_and_clears_rules(fleet, redis_url, tmp_path: Path):
    bad, good, broken = tmp_path / "bad.json", tmp_path / "good.json", tmp_path / "broken.json"
    bad.write_text(json.dumps(BAD))
    good.write_text(json.dumps(GOOD))
    broken.write_text("{nope")

    refused = cli(redis_url, "rollouts", "set", "sendEmail", str(bad))
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert refused.stderr.startswith("agentq: error: rollout rule for 'sendEmail' refused: nothing was written")
    assert "/routes/0/to: activity 'sendEmail' has no known version '3'; known versions: 1, 2" in refused.stderr
    assert "/routes/1/tenants: a non-empty list of tenant names is required" in refused.stderr
    unknown = cli(redis_url, "rollouts", "set", "sendMail", str(good))
    assert unknown.returncode == 1 and "unknown tool 'sendMail'; known tools: sendEmail" in unknown.stderr
    malformed = cli(redis_url, "rollouts", "set", "sendEmail", str(broken))
    assert malformed.returncode == 1 and "is not UTF-8 JSON" in malformed.stderr, malformed
    assert cli(redis_url, "rollouts").stdout == "no rollout rules (agentq rollouts set TOOL FILE)\n"

    done = cli(redis_url, "rollouts", "set", "sendEmail", str(good))
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout == "rollout rule for sendEmail set: sendEmail@2 for tenants acme; 5% model; the rest as usual\n"
    table = cli(redis_url, "rollouts").stdout.splitlines()
    assert [row.split()[:3] for row in table[1:]] == [["sendEmail", "sendEmail@2", "0"],
                                                      ["sendEmail", "(model)", "0"], ["sendEmail", "(usual)", "0"]]
    shown = json.loads(cli(redis_url, "rollouts", "--json").stdout)
    assert shown["tools"]["sendEmail"]["rule"] == GOOD

    cleared = cli(redis_url, "rollouts", "clear", "sendEmail")
    assert (cleared.returncode, cleared.stdout) == (0, "rollout rule for sendEmail cleared\n"), cleared
    again = cli(redis_url, "rollouts", "clear", "sendEmail")
    assert again.returncode == 1
    assert again.stderr == "agentq: error: tool 'sendEmail' has no rollout rule (tools with one: none)\n"


def test_activities_lists_each_version(fleet, redis_url):
    shown = cli(redis_url, "activities")
    assert [row.split()[:3] for row in shown.stdout.splitlines()[1:]] == [["sendEmail", "1", "yes"],
                                                                         ["sendEmail", "2", "yes"]]


@pytest.mark.parametrize("args", [("rollouts",), ("rollouts", "clear", "sendEmail")])
def test_an_unreachable_redis_is_one_line(args):
    done = cli("redis://127.0.0.1:1/0", *args)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("agentq: error: ") and done.stderr.count("\n") == 1, done.stderr
