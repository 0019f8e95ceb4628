"""A property-based run of schemathesis against the API's own OpenAPI document: whatever a client sends —
valid by the document or not — the API never answers 5xx (a real uvicorn server, real Redis, real workers)."""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, strategies
from schemathesis import GenerationMode
from schemathesis.core.result import Err, Ok

from tests.e2e.test_api import chain, finished

pytestmark = pytest.mark.timeout(600)

EXAMPLES = 25  # per operation and generation mode; the run is derandomized, so it is the same every time


def test_no_request_the_document_allows_or_forbids_gets_a_5xx(harness, echo, serve_api) -> None:
    api = serve_api(max_job_bytes=20_000)
    echo.opened.set()
    jobs = [api.request("POST", "/v1/jobs", json_body=chain("seed")).json()["id"],
            api.request("POST", "/v1/jobs", json_body={**chain("held"), "options": {"approval": ["echo"]}}).json()[
                "id"]]
    finished(api, jobs[0])
    calls = [c["id"] for c in api.request("GET", f"/v1/jobs/{jobs[1]}/calls").json()]
    document = api.request("GET", "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    results = list(schema.get_all_operations())
    invalid = [result.err() for result in results if isinstance(result, Err)]
    assert not invalid, invalid  # an operation the document describes that schemathesis cannot read
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) >= 14
    tried: dict[str, set[int]] = {}

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                                 suppress_health_check=list(HealthCheck))
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode),
                              job=strategies.sampled_from([*jobs, None]),
                              call=strategies.sampled_from([*calls, None]))
            def run(case, job, call) -> None:
                if job is not None and case.path_parameters and "job_id" in case.path_parameters:
                    case.path_parameters["job_id"] = job  # often a real job, so the deeper paths are taken
                if call is not None and case.path_parameters and "call_id" in case.path_parameters:
                    case.path_parameters["call_id"] = call
                response = case.call(base_url=api.base_url, headers=api.headers(), timeout=30)
                label = f"{case.method} {case.path}"
                tried.setdefault(label, set()).add(response.status_code)
                assert response.status_code < 500, (label, case.path_parameters, case.query, case.body,
                                                    response.status_code, response.text[:500])

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing of it can be made invalid

    assert any(400 <= status < 500 for statuses in tried.values() for status in statuses)
    assert any(status < 300 for statuses in tried.values() for status in statuses)
