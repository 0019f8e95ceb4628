"""The fleet's shared settings in the store (docs/config.md): tenants' limits, prices, model limits and the webhook
allowlist hold in every process, whether it was started with their environment variables or not. Real processes:
`agentq worker` started with (or without) the variables, `agentq submit` / `agentq config` without them, `agentq api`
as a running process, real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentq.client import Client
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.e2e.test_api_cli import api_process, wait_healthy  # noqa: F401
from tests.integration.conftest import tool_schema
from tests.integration.procs import cli, wait_for
from tests.integration.test_metrics import metrics_process, samples, value  # noqa: F401

pytestmark = pytest.mark.timeout(120)

ACME = {"acme": {"jobs_per_minute": 2}}
ECHO = {"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}]}
ADMIN, SUBMIT = "config-admin-token-0123456789", "config-acme-token-0123456789"


def write(path: Path, value: object) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def stored(redis_url: str) -> dict[str, str]:
    """The config hash as Redis holds it (what "nothing written" is checked against)."""
    store = StateStore(redis_url)
    try:
        return dict(store.redis.hgetall(store.fleet.config))
    finally:
        store.redis.close()


def jobs_of(redis_url: str) -> list:
    store = StateStore(redis_url)
    try:
        return store.recent_jobs(1000)
    finally:
        store.redis.close()


def test_a_submitter_without_agentq_tenants_is_refused_at_acmes_limit_once_it_is_in_the_store(
        worker_procs, redis_url: str, tmp_path: Path):
    worker = worker_procs.start(["procEcho"], AGENTQ_TENANTS=json.dumps(ACME))
    worker_procs.wait_live(worker, ["procEcho"])
    job = write(tmp_path / "job.json", ECHO)
    for _ in range(2):  # `cli` runs `agentq submit` without any AGENTQ_TENANTS
        submitted = cli(redis_url, "submit", job, "--tenant", "acme")
        assert submitted.returncode == 0, submitted.stderr
    before = jobs_of(redis_url)
    refused = cli(redis_url, "submit", job, "--tenant", "acme")
    assert refused.returncode == 1, refused.stdout
    assert "tenant 'acme' is at its limit of 2 jobs per minute" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and jobs_of(redis_url) == before  # nothing written
    assert cli(redis_url, "submit", job, "--tenant", "globex").returncode == 0  # another tenant is not limited
    # the worker, the first process started with AGENTQ_TENANTS, seeded the fleet's tenants with it at start
    shown = cli(redis_url, "config", "tenants", "--json")
    assert shown.returncode == 0, shown.stderr
    assert {k: v for k, v in json.loads(shown.stdout).items() if k in ("version", "value", "source")} == {
        "version": 1, "value": ACME, "source": "AGENTQ_TENANTS"}


def test_a_worker_without_agentq_tenants_counts_acmes_calls_under_its_own_label(
        worker_procs, redis_url: str, tmp_path: Path, metrics_process):  # noqa: F811
    changed = cli(redis_url, "config", "set", "tenants", write(tmp_path / "tenants.json", ACME))
    assert changed.returncode == 0, changed.stderr
    assert "config tenants set: version 1 (1 tenants: acme)" in changed.stdout
    metrics_dir = tmp_path / "metrics"
    worker = worker_procs.start(["procEcho"], AGENTQ_METRICS_DIR=str(metrics_dir))  # no AGENTQ_TENANTS
    worker_procs.wait_live(worker, ["procEcho"])
    with Client(settings=Settings(redis_url=redis_url), tenant="acme") as client:
        assert client.submit(ECHO).result(timeout=30)["status"] == "succeeded"
    server = metrics_process(metrics_dir)  # `agentq metrics`, also without AGENTQ_TENANTS
    found = wait_for(lambda: value(found := samples(server.scrape()), "agentq_calls_total", activity="procEcho",
                                   status="done", tenant="acme") and found, 15, "acme's call to be counted")
    assert value(found, "agentq_calls_total", activity="procEcho", status="done", tenant="acme") == 1
    assert value(found, "agentq_calls_total", activity="procEcho", status="done", tenant="other") is None
    assert value(found, "agentq_jobs_total", status="succeeded", tenant="acme") == 1


def test_an_x_model_job_from_a_client_without_agentq_llm_prices_is_accepted_once_prices_are_in_the_store(
        worker_procs, redis_url: str, tmp_path: Path):
    prices = write(tmp_path / "prices.json", {"my-proxy-model": {"input": 1, "output": 5}})
    worker = worker_procs.start(["procEcho"], AGENTQ_LLM_PRICES=prices)
    worker_procs.wait_live(worker, ["procEcho"])

    def job(model: str) -> str:
        tool = {**tool_schema("digest", params={"text": {"type": "string"}}, output={"type": "string"}),
                "x-model": model}
        return write(tmp_path / f"{model}.json", {"context": [{"type": "text", "text": "Digest."}], "tools": [tool]})

    accepted = cli(redis_url, "submit", job("my-proxy-model"))  # no AGENTQ_LLM_PRICES in this process
    assert accepted.returncode == 0, accepted.stderr
    refused = cli(redis_url, "submit", job("nobody-prices-this"))
    assert refused.returncode == 1 and "/tools/0" in refused.stderr, refused.stderr
    assert "'nobody-prices-this' is not a model the price table knows" in refused.stderr


def test_config_set_and_show_at_the_cli_with_bad_input_refused_and_nothing_written(redis_url: str, tmp_path: Path):
    listed = cli(redis_url, "config")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()[1:]] == [
        ["llm_limits", "-"], ["llm_prices", "-"], ["tenants", "-"], ["webhook_allowlist", "-"]]
    limits = {"claude-sonnet-4-6": {"requests_per_minute": 50}}
    first = cli(redis_url, "config", "set", "llm_limits", write(tmp_path / "limits.json", limits))
    assert first.returncode == 0 and "version 1" in first.stdout, first.stderr
    second = cli(redis_url, "config", "set", "llm_limits", "-", input=json.dumps({"*": {"requests_per_minute": 9}}))
    assert second.returncode == 0 and "version 2" in second.stdout, second.stderr
    allowlist = cli(redis_url, "config", "set", "webhook_allowlist", write(tmp_path / "hosts.json", ["127.0.0.1"]))
    assert allowlist.returncode == 0 and "version 1" in allowlist.stdout, allowlist.stderr
    held = stored(redis_url)

    broken = tmp_path / "broken.json"
    broken.write_text('{"acme": {"jobs_per_minute": 2}', encoding="utf-8")
    bad_tenants = {"acme": {"jobs_per_minute": -1, "max_active_jobs": 1.5, "speed": 3}, "bad name": {},
                   "globex": 7}
    cases = [
        (["config", "set", "tenant", str(broken)], "no config named 'tenant': the fleet's config names are "
                                                   "llm_limits, llm_prices, tenants, webhook_allowlist"),
        (["config", "tenant"], "no config named 'tenant'"),
        (["config", "set", "tenants", str(broken)], f"config file {broken} is not UTF-8 JSON"),
        (["config", "set", "tenants", str(tmp_path / "missing.json")], "cannot read config file"),
        (["config", "set", "tenants"], "config set takes NAME FILE"),
    ]
    for args, message in cases:
        done = cli(redis_url, *args)
        assert done.returncode == 1 and message in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    refused = cli(redis_url, "config", "set", "tenants", write(tmp_path / "bad.json", bad_tenants))
    assert refused.returncode == 1 and "config tenants refused, nothing was written (5 problems)" in refused.stderr
    for pointer in ("/acme/jobs_per_minute", "/acme/max_active_jobs", "/acme/speed", "/globex"):
        assert f"  {pointer}: " in refused.stderr, (pointer, refused.stderr)
    assert "'bad name' is not a tenant name" in refused.stderr
    bad_prices = cli(redis_url, "config", "set", "llm_prices",
                     write(tmp_path / "prices.json", {"m": {"input": "3"}, "n": []}))
    assert bad_prices.returncode == 1
    for pointer in ("/m/input", "/m/output", "/n"):
        assert f"  {pointer}: " in bad_prices.stderr, (pointer, bad_prices.stderr)
    bad_hosts = cli(redis_url, "config", "set", "webhook_allowlist", write(tmp_path / "h.json", ["ok", 3, "1.2.3/99"]))
    assert bad_hosts.returncode == 1 and "  /1: " in bad_hosts.stderr and "  /2: not a network" in bad_hosts.stderr
    assert stored(redis_url) == held  # nothing was written

    shown = json.loads(cli(redis_url, "config", "llm_limits", "--json").stdout)
    assert (shown["version"], shown["value"], shown["source"]) == (2, {"*": {"requests_per_minute": 9}}, "set")
    listed = cli(redis_url, "config").stdout
    assert "llm_limits         2" in listed and "1 models limited: *" in listed and "1 entries: 127.0.0.1" in listed


def test_the_config_routes_for_admin_tokens_with_422_pointers_and_nothing_written(
        harness, serve_api, redis_url: str, tmp_path: Path):
    tokens = write(tmp_path / "tokens.json", {ADMIN: {"tenant": "default", "role": "admin"},
                                              SUBMIT: {"tenant": "acme", "role": "submit"}})
    api = serve_api(tokens=[f"@{tokens}"])
    every = api.request("GET", "/v1/config", token=ADMIN)
    assert every.status == 200 and sorted(every.json()["config"]) == [
        "llm_limits", "llm_prices", "tenants", "webhook_allowlist"]
    assert every.json()["config"]["tenants"]["version"] == 0 and every.json()["config"]["tenants"]["value"] is None
    put = api.request("PUT", "/v1/config/tenants", json_body=ACME, token=ADMIN)
    assert put.status == 200, put.body
    assert {k: put.json()[k] for k in ("name", "version", "value", "source")} == {
        "name": "tenants", "version": 1, "value": ACME, "source": "set"}
    again = api.request("PUT", "/v1/config/tenants", json_body={"acme": {"max_active_jobs": 3}}, token=ADMIN)
    assert again.json()["version"] == 2
    held = stored(redis_url)

    bad = api.request("PUT", "/v1/config/tenants", json_body={"acme": {"jobs_per_minute": 0}, "x y": {}},
                      token=ADMIN)
    assert bad.status == 422, bad.body
    error = bad.json()["error"]
    assert error["type"] == "ConfigValueError" and "nothing was written" in error["message"]
    assert [p["pointer"] for p in error["problems"]] == ["/acme/jobs_per_minute", "/x y"]
    limits = api.request("PUT", "/v1/config/llm_limits", json_body={"m": {"requests_per_minute": -2}, "": {}},
                         token=ADMIN)
    assert limits.status == 422 and {p["pointer"] for p in limits.json()["error"]["problems"]} >= {
        "/m/requests_per_minute", "/"}
    unknown = api.request("PUT", "/v1/config/tenant", json_body={}, token=ADMIN)
    assert unknown.status == 404 and "llm_limits, llm_prices, tenants, webhook_allowlist" in unknown.json()[
        "error"]["message"]
    malformed = api.request("PUT", "/v1/config/tenants", body=b'{"acme": ', token=ADMIN,
                            headers={"Content-Type": "application/json"})
    assert malformed.status == 400
    assert api.request("PUT", "/v1/config/tenants", json_body={}, token=SUBMIT).status == 403
    assert api.request("GET", "/v1/config", token=SUBMIT).status == 403
    assert stored(redis_url) == held  # nothing was written

    one = api.request("GET", "/v1/config/tenants", token=ADMIN).json()
    assert (one["name"], one["version"], one["value"]) == ("tenants", 2, {"acme": {"max_active_jobs": 3}})
    assert api.request("GET", "/v1/config/nope", token=ADMIN).status == 404


def test_a_change_made_with_config_set_reaches_a_running_api_within_a_heartbeat(
        api_process, redis_url: str, tmp_path: Path):  # noqa: F811
    tokens = write(tmp_path / "tokens.json", {SUBMIT: {"tenant": "acme", "role": "submit"}})
    _, api = api_process(AGENTQ_API_TOKENS=f"@{tokens}", AGENTQ_HEARTBEAT_S="1")
    wait_healthy(api)

    def submit() -> int:
        return api.request("POST", "/v1/jobs", json_body={"calls": []}, token=SUBMIT).status

    assert [submit() for _ in range(3)] == [201] * 3  # acme is not limited: the API read no tenants
    changed = cli(redis_url, "config", "set", "tenants", write(tmp_path / "t.json", {"acme": {"jobs_per_minute": 1}}))
    assert changed.returncode == 0, changed.stderr
    set_at = time.monotonic()
    answers: list[int] = []

    def refused() -> bool:
        answers.append(submit())
        return answers[-1] == 429

    wait_for(refused, 10, "the running API to refuse acme at its new limit")
    refused_after = time.monotonic() - set_at
    assert set(answers[:-1]) <= {201}, answers  # the old limits (none), then the new one's burst of 1, then 429
    assert refused_after < 1 + 1.5, refused_after  # one heartbeat (1 s) and the requests' own time
