"""Schedules through the HTTP API and the `agentq` command (docs/schedules.md): a schedule is checked whole before
anything is written (422 with every problem's pointer, the job's as a submission's, one line at the CLI); each
tenant sees and changes its own (another tenant's is 404), an admin all; listed with their next runs in their time
zone and their last job; paused, resumed, triggered and deleted. Real processes fire them in
tests/integration/test_schedules.py."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agentq.protocol.records import WorkerAnnouncement
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.integration.procs import cli

pytestmark = pytest.mark.timeout(120)

ADMIN, ACME, BETA, READER = "admin-token-0123456789", "acme-token-0123456789", "beta-token-0123456789", \
    "acme-reader-0123456789"
V1 = {"name": "sendEmail", "activity": "sendEmail", "version": "1", "task": "agentq.activity.sendEmail",
      "queue": "agentq.activity.sendEmail"}
JOB = {"calls": [{"_tool": "sendEmail", "to": "team@example.com", "_outputPath": "†state.sent"}]}
REPORT = {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin", "job": JOB}
BAD = {"cron": "0 25 * * *", "every_s": 10, "timezone": "Europe/Atlantis", "catchup_window_s": -1,
       "overlap": "queue", "job": {"calls": [{"_tool": "sendMail", "to": "x"}]}}


@pytest.fixture
def fleet(harness, redis_url, tmp_path: Path):
    """sendEmail announced by a live worker and its tool published; tokens for an admin, acme, beta and acme's
    reader. No dispatcher runs: nothing fires here."""
    harness.tool("sendEmail", params={"to": {"type": "string"}}, required=["to"])
    store = StateStore(redis_url)
    RedisFleet(store).publish_tools({"sendEmail": harness.tools.snapshot()["sendEmail"]}, publisher="test")
    RedisFleet(store).announce_worker("host:1:live", WorkerAnnouncement("host:1:live", activities=(V1,)), ttl_s=60)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"},
                                  BETA: {"tenant": "beta"}, READER: {"tenant": "acme", "role": "read"}}))
    yield f"@{tokens}"
    store.close()


def schedule_keys(redis_url: str) -> list[str]:
    store = StateStore(redis_url)
    try:
        return sorted(str(k) for k in store.redis.keys("agentq:{schedules}:*") if not str(k).endswith(":lease"))
    finally:
        store.close()


def test_a_bad_schedule_is_one_422_naming_every_problem_and_nothing_is_written(fleet, serve_api, redis_url):
    api = serve_api(tokens=[fleet])
    refused = api.request("PUT", "/v1/schedules/report", json_body=BAD, token=ACME)
    assert refused.status == 422, refused.body
    error = refused.json()["error"]
    assert (error["type"], error["message"]) == ("ScheduleError", "schedule 'report' refused: nothing was written")
    problems = {p["pointer"]: p["message"] for p in error["problems"]}
    assert set(problems) == {"", "/timezone", "/cron", "/catchup_window_s", "/overlap", "/job/calls/0/_tool"}
    assert "Europe/Atlantis" in problems["/timezone"] and "does not parse" in problems["/cron"]
    assert problems[""] == "give either cron or every_s, not both"
    assert "sendMail" in problems["/job/calls/0/_tool"]  # the job is checked as a submission would be
    neither = api.request("PUT", "/v1/schedules/report", json_body={"job": JOB, "every_s": 0}, token=ACME)
    assert [p["pointer"] for p in neither.json()["error"]["problems"]] == ["/every_s"]
    bad_name = api.request("PUT", "/v1/schedules/bad%20name", json_body=REPORT, token=ACME)
    assert bad_name.status == 422 and "not a schedule name" in bad_name.body.decode()
    assert api.request("PUT", "/v1/schedules/report", body=b"{", token=ACME).status == 400
    assert api.request("GET", "/v1/schedules", token=ADMIN).json() == {"schedules": []}
    assert schedule_keys(redis_url) == []  # nothing was written


def test_each_tenant_sees_and_changes_its_own_schedules_and_an_admin_all(fleet, serve_api):
    api = serve_api(tokens=[fleet])
    assert api.request("PUT", "/v1/schedules/report", json_body=REPORT, token=READER).status == 403
    stored = api.request("PUT", "/v1/schedules/report", json_body=REPORT, token=ACME)
    assert stored.status == 200, stored.body
    view = stored.json()
    assert (view["tenant"], view["overlap"], view["catchup_window_s"], view["paused"]) == ("acme", "skip", 0, False)
    berlin = [datetime.fromisoformat(t).astimezone(ZoneInfo("Europe/Berlin")) for t in view["next_runs"]]
    assert len(berlin) == 3 and all((t.hour, t.minute) == (8, 0) and t.weekday() < 5 for t in berlin)
    assert view["last_job"] is None and view["counts"] == {"fired": 0, "skipped": 0, "missed": 0, "failed": 0}

    assert api.request("GET", "/v1/schedules/report", token=BETA).status == 404  # another tenant's: not found
    assert api.request("POST", "/v1/schedules/report/pause", token=BETA).status == 404
    assert api.request("GET", "/v1/schedules", token=BETA).json() == {"schedules": []}
    taken = api.request("PUT", "/v1/schedules/report", json_body=REPORT, token=BETA)
    assert taken.status == 409  # names are the fleet's: a slot's job id derives from it
    other = api.request("PUT", "/v1/schedules/beta-report", json_body={**REPORT, "tenant": "acme"}, token=BETA)
    assert [p["pointer"] for p in other.json()["error"]["problems"]] == ["/tenant"]
    assert api.request("PUT", "/v1/schedules/ops-report", json_body={**REPORT, "tenant": "beta"},
                       token=ADMIN).json()["tenant"] == "beta"  # an admin names the tenant
    assert [s["name"] for s in api.request("GET", "/v1/schedules", token=ADMIN).json()["schedules"]] == [
        "ops-report", "report"]
    assert [s["name"] for s in api.request("GET", "/v1/schedules", token=READER).json()["schedules"]] == ["report"]

    paused = api.request("POST", "/v1/schedules/report/pause", token=ACME).json()
    assert paused["paused"] is True and paused["next_runs"] == []
    resumed = api.request("POST", "/v1/schedules/report/resume", token=ACME).json()
    assert resumed["paused"] is False and resumed["next_runs"] == view["next_runs"]
    triggered = api.request("POST", "/v1/schedules/report/trigger", token=ACME)
    assert triggered.status == 202
    job_id = triggered.json()["job_id"]
    assert job_id.startswith("sched-report-now")
    assert api.request("GET", f"/v1/jobs/{job_id}", token=ACME).status == 200  # a job of acme's
    assert api.request("GET", f"/v1/jobs/{job_id}", token=BETA).status == 404
    assert api.request("DELETE", "/v1/schedules/report", token=READER).status == 403
    assert api.request("DELETE", "/v1/schedules/report", token=ACME).status == 204
    assert api.request("GET", "/v1/schedules/report", token=ACME).status == 404
    assert api.request("DELETE", "/v1/schedules/report", token=ACME).status == 404


def test_the_cli_sets_lists_and_acts_on_schedules(fleet, redis_url, tmp_path: Path):
    bad, good, broken = tmp_path / "bad.json", tmp_path / "good.json", tmp_path / "broken.json"
    bad.write_text(json.dumps(BAD))
    good.write_text(json.dumps(REPORT))
    broken.write_text("{nope")

    refused = cli(redis_url, "schedules", "set", "report", str(bad))
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert refused.stderr.count("\n") == 1, refused.stderr  # every problem on one line
    assert refused.stderr.startswith("agentq: error: schedule 'report' refused: nothing was written; ")
    assert "/timezone: unknown time zone 'Europe/Atlantis'" in refused.stderr
    assert "/job/calls/0/_tool" in refused.stderr
    malformed = cli(redis_url, "schedules", "set", "report", str(broken))
    assert malformed.returncode == 1 and "is not UTF-8 JSON" in malformed.stderr, malformed
    assert schedule_keys(redis_url) == []

    done = cli(redis_url, "schedules", "set", "report", str(good))
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.startswith("schedule report set: cron '0 8 * * 1-5' in Europe/Berlin, overlap skip; next runs ")
    table = cli(redis_url, "schedules").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "TENANT", "WHEN", "NEXT"] and table[1].split()[:2] == ["report", "default"]
    shown = json.loads(cli(redis_url, "schedules", "show", "report").stdout)
    assert shown["last_job"] is None and shown["tenant"] == "default"
    assert shown["cron"] == "0 8 * * 1-5" and len(shown["next_runs"]) == 3
    assert cli(redis_url, "schedules", "pause", "report").stdout == "schedule report paused\n"
    resumed = cli(redis_url, "schedules", "resume", "report").stdout
    assert resumed == f"schedule report resumed: next run {shown['next_runs'][0]}\n"
    triggered = cli(redis_url, "schedules", "trigger", "report")
    assert triggered.returncode == 0 and triggered.stdout.startswith("schedule report triggered: job sched-report-now")
    assert cli(redis_url, "schedules", "delete", "report").stdout == "schedule report deleted (its jobs stay)\n"
    gone = cli(redis_url, "schedules", "delete", "report")
    assert (gone.returncode, gone.stderr) == (1, "agentq: error: no schedule named 'report'\n")
