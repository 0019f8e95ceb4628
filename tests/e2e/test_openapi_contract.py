"""The OpenAPI document as a contract: the one a real API serves is the checked-in clients/openapi.json (what the
TypeScript client is generated from), and it is what a generator turns into good code: operation ids, named
schemas, the one error body on every error answer."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from agentq.api.openapi import render

CHECKED_IN = Path(__file__).resolve().parents[2] / "clients" / "openapi.json"
REGENERATE = "python3 dev.py openapi"


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, operation) for path, methods in document["paths"].items()
            for method, operation in methods.items()]


def test_the_served_document_is_the_checked_in_one(harness, serve_api) -> None:
    served = render(serve_api().request("GET", "/openapi.json").json())
    kept = CHECKED_IN.read_text(encoding="utf-8") if CHECKED_IN.exists() else ""
    if served != kept:
        diff = "".join(list(difflib.unified_diff(kept.splitlines(True), served.splitlines(True),
                                                 "clients/openapi.json", "served"))[:60])
        raise AssertionError(f"the API's OpenAPI document differs from clients/openapi.json; regenerate it (and the "
                             f"TypeScript client's types) with `{REGENERATE}`, then commit both:\n{diff}")


def test_every_operation_has_a_unique_camel_case_id_and_declares_its_errors() -> None:
    document = json.loads(CHECKED_IN.read_text(encoding="utf-8"))
    ids = [operation["operationId"] for _, _, operation in _operations(document)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert all(re.fullmatch(r"[a-z][A-Za-z0-9]*", i) for i in ids), ids
    assert {"submitJob", "getJob", "jobEvents", "approveCall", "rejectCall", "editCall", "cancelJob"} <= set(ids)
    schemas = document["components"]["schemas"]
    assert {"Job", "JobRecord", "Call", "Event", "Problem", "Error", "Tenant", "RolloutReport"} <= set(schemas)
    assert not {"HTTPValidationError", "ValidationError"} & set(schemas)
    for method, path, operation in _operations(document):
        errors = {status: response for status, response in operation["responses"].items() if status[0] in "45"}
        assert "500" in errors, (method, path)
        assert "401" in errors or not operation.get("security"), (method, path)
        for status, response in errors.items():
            assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}, (
                method, path, status)
    submit = document["paths"]["/v1/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Job"}
    assert {"201", "422", "429"} <= set(submit["responses"])
    assert "Retry-After" in submit["responses"]["429"]["headers"]
