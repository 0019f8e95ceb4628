"""The job and call counters' `tenant` label (docs/tenants.md) on a real `/metrics` scrape: a tenant configured in
`AGENTQ_TENANTS` or named by the tokens file is its own label, the default tenant is `default`, any other tenant is
`other` (bounded cardinality). Real Redis, a real in-process Celery worker, the API under uvicorn."""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Harness
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(120)

ADMIN = "billing-admin-token-0123456789"


def counters(text: str) -> dict[tuple[str, str, str], float]:
    """(sample name, status, tenant) -> value of the job counter and the `echo` call counter of a scrape."""
    return {(s.name, s.labels["status"], s.labels["tenant"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "agentq_jobs_total" or (s.name == "agentq_calls_total" and s.labels["activity"] == "echo")}


def test_job_and_call_counters_carry_a_bounded_tenant_label(harness: Harness, serve_api, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ADMIN: {"tenant": "billing", "role": "admin"}}))
    harness.settings = harness.settings.model_copy(update={"tenants": {"acme": {}}, "api_tokens": [f"@{tokens}"]})
    harness.tool("echo", params={"text": {"type": "string"}})
    harness.activities.register("echo", lambda call: {"said": call["text"]})
    start_worker(harness)
    api = serve_api(tokens=[f"@{tokens}"])
    tenants = ["acme", "billing", "default", "zeta", "omega"]
    for tenant in tenants:
        record = harness.run({"calls": [{"_tool": "echo", "text": tenant, "_outputPath": "†state.x"}]}, tenant=tenant)
        assert record["status"] == "succeeded" and record["tenant"] == tenant
    wanted = {"acme": 1, "billing": 1, "default": 1, "other": 2}
    deadline = time.monotonic() + 15
    while True:  # a job's end is counted just after the step that ended it, a call just after its commit
        text = api.request("GET", "/metrics", token=ADMIN).body.decode()
        found = counters(text)
        jobs = {t: found.get(("agentq_jobs_total", "succeeded", t)) for t in wanted}
        calls = {t: found.get(("agentq_calls_total", "done", t)) for t in wanted}
        if (jobs, calls) == (wanted, wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert jobs == wanted
    assert calls == wanted
    assert {tenant for _, _, tenant in found} == set(wanted)  # no series for zeta or omega: they are `other`
    assert "zeta" not in text and "omega" not in text
