"""Tenants over real HTTP (docs/tenants.md): a tokens file gives each token a tenant and a role; a token sees and acts
on its tenant's jobs only (another tenant's job is 404 and never listed), an admin sees all, a read token cannot
write. Real uvicorn, real Redis, real in-process Celery workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentq.api import ApiAuth
from agentq.errors import ConfigurationError
from tests.api_server import ApiServer
from tests.e2e.test_api import chain, finished

pytestmark = pytest.mark.timeout(120)

ADMIN, ACME, GLOBEX, ACME_READ = ("admin-token-0123456789", "acme-token-0123456789", "globex-token-0123456789",
                                  "acme-read-token-0123456789")


@pytest.fixture
def tokens_file(tmp_path: Path) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({
        ADMIN: {"tenant": "ops", "role": "admin"},
        ACME: {"tenant": "acme", "role": "submit"},
        GLOBEX: {"tenant": "globex"},  # role defaults to submit
        ACME_READ: {"tenant": "acme", "role": "read"},
    }))
    return f"@{path}"


def submit(api: ApiServer, token: str, text: str, **headers: str) -> dict:
    created = api.request("POST", "/v1/jobs", json_body=chain(text), token=token, headers=headers)
    assert created.status in (200, 201), created.body
    return created.json()


def test_a_tenant_sees_and_acts_on_its_own_jobs_only(harness, echo, serve_api, tokens_file):
    api = serve_api(tokens=[tokens_file])
    mine = submit(api, ACME, "acme's")
    theirs = submit(api, GLOBEX, "globex's")
    assert (mine["tenant"], theirs["tenant"]) == ("acme", "globex")
    assert finished(api, mine["id"])["status"] == "succeeded"  # (`finished` reads with the first token: the admin)
    finished(api, theirs["id"])

    # another tenant's job does not exist for this token: every route is 404, exactly as for an unknown job
    unknown = api.request("GET", "/v1/jobs/job_never_submitted", token=ACME).json()
    for method, path in (("GET", ""), ("GET", "/calls"), ("GET", "/history"), ("GET", "/events"),
                         ("GET", "/deliveries"), ("POST", "/cancel"), ("POST", "/calls/call_x/approve"),
                         ("POST", "/calls/call_x/reject")):
        answer = api.request(method, f"/v1/jobs/{theirs['id']}{path}", token=ACME)
        assert answer.status == 404, (method, path, answer.body)
        assert answer.json()["error"]["type"] == unknown["error"]["type"] == "JobNotFound"
    assert api.request("GET", f"/v1/jobs/{theirs['id']}", token=GLOBEX).json()["status"] == "succeeded"

    # lists hold the token's own tenant only; an admin's holds every tenant's, and can be narrowed
    assert [r["id"] for r in api.request("GET", "/v1/jobs", token=ACME).json()] == [mine["id"]]
    assert [r["id"] for r in api.request("GET", "/v1/jobs?tenant=globex", token=ACME).json()] == []
    assert [r["id"] for r in api.request("GET", "/v1/jobs?status=succeeded", token=GLOBEX).json()] == [theirs["id"]]
    every = api.request("GET", "/v1/jobs", token=ADMIN).json()
    assert {r["id"]: r["tenant"] for r in every} == {mine["id"]: "acme", theirs["id"]: "globex"}
    assert [r["id"] for r in api.request("GET", "/v1/jobs?tenant=acme", token=ADMIN).json()] == [mine["id"]]
    assert api.request("GET", f"/v1/jobs/{theirs['id']}/calls", token=ADMIN).status == 200


def test_a_read_token_reads_its_tenant_but_cannot_submit_cancel_or_decide(harness, echo, serve_api, tokens_file):
    api = serve_api(tokens=[tokens_file])
    job = submit(api, ACME, "to read")
    finished(api, job["id"])
    assert api.request("GET", f"/v1/jobs/{job['id']}", token=ACME_READ).json()["tenant"] == "acme"
    assert [r["id"] for r in api.request("GET", "/v1/jobs", token=ACME_READ).json()] == [job["id"]]
    refused = api.request("POST", "/v1/jobs", json_body=chain("no"), token=ACME_READ)
    assert refused.status == 403 and "only read" in refused.json()["error"]["message"]
    for path in ("/cancel", "/calls/call_x/approve"):
        assert api.request("POST", f"/v1/jobs/{job['id']}{path}", token=ACME_READ).status == 403
    assert len(api.request("GET", "/v1/jobs", token=ADMIN).json()) == 1  # nothing was written by the refusals
    assert api.request("GET", "/v1/me", token=ACME_READ).json() == {"tenant": "acme", "role": "read"}
    assert api.request("GET", "/v1/me", token=ADMIN).json() == {"tenant": "ops", "role": "admin"}
    assert api.request("GET", "/metrics", token=ACME).status == 403
    assert api.request("GET", "/metrics", token=ADMIN).status == 200


def test_an_idempotency_key_is_the_tenants_own(harness, echo, serve_api, tokens_file):
    api = serve_api(tokens=[tokens_file])
    first = submit(api, ACME, "same body", **{"Idempotency-Key": "k-1"})
    again = api.request("POST", "/v1/jobs", json_body=chain("same body"), token=ACME,
                        headers={"Idempotency-Key": "k-1"})
    other = submit(api, GLOBEX, "same body", **{"Idempotency-Key": "k-1"})
    assert again.status == 200 and again.json()["id"] == first["id"]
    assert other["id"] != first["id"] and other["tenant"] == "globex"


def test_plain_tokens_are_admins_of_the_default_tenant(harness, echo, serve_api):
    api = serve_api(tokens=["plain-token"])
    job = submit(api, "plain-token", "plain")
    assert job["tenant"] == "default"
    assert api.request("GET", "/v1/me", token="plain-token").json() == {"tenant": "default", "role": "admin"}


@pytest.mark.parametrize(("content", "expected"), [
    ("not json", "not JSON"),
    ("[]", "expected an object of tokens"),
    (json.dumps({"short": {"tenant": "a"}}), "token #1 has 5 characters"),
    (json.dumps({"x" * 20: {"tenant": "a b"}, "y" * 20: {"role": "owner"}, "z" * 20: {"tenant": "a", "extra": 1}}),
     "token #1: 'a b' is not a tenant name|; token #2: role 'owner' is none of admin, submit, read; "
     "token #3: unknown field 'extra'"),
])
def test_a_tokens_file_that_cannot_be_used_is_one_error_naming_every_problem(tmp_path, content, expected):
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as raised:
        ApiAuth.configure([f"@{path}"])
    message = str(raised.value)
    assert all(fragment in message for fragment in expected.split("|")), message
    assert "\n" not in message and str(path) in message
    assert "x" * 20 not in message  # a token is never printed
    with pytest.raises(ConfigurationError, match="cannot read it"):
        ApiAuth.configure([f"@{tmp_path / 'missing.json'}"])


def test_a_tenants_limits_answer_429_with_retry_after_and_write_nothing(harness, echo, serve_api, tokens_file):
    api = serve_api(tokens=[tokens_file], tenants={"acme": {"jobs_per_minute": 2}, "globex": {"max_active_jobs": 1}})
    first, second = submit(api, ACME, "one"), submit(api, ACME, "two")
    refused = api.request("POST", "/v1/jobs", json_body=chain("three"), token=ACME)
    assert refused.status == 429, refused.body
    error = refused.json()["error"]
    assert error["type"] == "RateLimited" and "2 jobs per minute" in error["message"]
    assert 29 <= int(refused.headers["retry-after"]) <= 30
    assert {r["id"] for r in api.request("GET", "/v1/jobs?tenant=acme", token=ADMIN).json()} == {first["id"],
                                                                                              second["id"]}
    assert submit(api, ADMIN, "another tenant's")["tenant"] == "ops"  # not limited

    gate = {"calls": [{"_tool": "gate", "text": "g", "_outputPath": "†state.g"}]}
    held = api.request("POST", "/v1/jobs", json_body=gate, token=GLOBEX).json()
    busy = api.request("POST", "/v1/jobs", json_body=chain("busy"), token=GLOBEX)
    assert busy.status == 429 and "1 active jobs" in busy.json()["error"]["message"], busy.body
    assert int(busy.headers["retry-after"]) >= 1
    echo.opened.set()
    assert finished(api, held["id"])["status"] == "succeeded"
    assert submit(api, GLOBEX, "after")["tenant"] == "globex"  # the ended job left its place
