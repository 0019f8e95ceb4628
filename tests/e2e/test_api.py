"""The HTTP API over real HTTP (README.md#the-http-api-and-the-web-page): a real uvicorn server, real Redis, real
in-process Celery workers.

Every endpoint, auth on and off, invalid bodies answered 4xx with nothing written, the event stream resumed
with `Last-Event-ID`, the seed-004 parts format with and without markers, idempotent creation.
"""

from __future__ import annotations

import json
import threading
from typing import Any, cast

import pytest
import redis

from agentq.protocol.history import STREAM_MARKER_PREFIX, legacy_activity
from tests.api_server import ApiServer, SseMessage
from tests.integration.conftest import store_of
from tests.integration.test_approvals import wait_until

pytestmark = pytest.mark.timeout(120)


def chain(*texts: str) -> dict:
    calls = [{"_tool": "echo", "text": texts[0], "_outputPath": "†state.s0"}]
    calls += [{"_tool": "echo", "text": t, "_outputPath": f"†state.s{i}"} for i, t in enumerate(texts[1:], 1)]
    return {"calls": calls}


def raw_keys(harness) -> set[str]:
    client = redis.Redis.from_url(harness.settings.redis_url, decode_responses=True)
    try:
        keys = cast(list[str], client.keys("agentq:*"))  # decode_responses=True: str, which redis-py's types miss
        # the fleet's own keys left out: announcements, and the admission sweep's turn (a heartbeat takes it for
        # a heartbeat, so it comes and goes by itself) and the store run it looked at (written by its first turn)
        return {k for k in keys if not k.startswith(("agentq:worker", "agentq:activities", "agentq:tools"))
                and k not in ("agentq:{admission}:sweep", "agentq:{admission}:run")}
    finally:
        client.close()


def finished(api: ApiServer, job_id: str) -> dict:
    list(api.sse(f"/v1/jobs/{job_id}/events"))  # the stream ends after job.finished
    record = api.request("GET", f"/v1/jobs/{job_id}").json()
    assert record["status"] in ("succeeded", "failed", "canceled")
    return record


# ---------------------------------------------------------------------------------------------- jobs


def test_a_plan_job_submitted_over_http_runs_and_its_record_calls_and_history_are_served(harness, echo, serve_api):
    api = serve_api()
    created = api.request("POST", "/v1/jobs", json_body={"calls": [
        {"_tool": "echo", "text": "hi", "_outputPath": "†state.first"},
        {"_tool": "echo", "text": "†state.first.said", "_outputPath": "†state.second"}]})
    assert created.status == 201, created.body
    body = created.json()
    job_id = body["id"]
    assert created.headers["location"] == f"/v1/jobs/{job_id}"
    assert set(body) == {"id", "status", "tenant", "result", "state", "instances", "error", "usage", "created_at",
                         "finished_at"}
    assert body["tenant"] == "default"
    record = finished(api, job_id)
    assert record["status"] == "succeeded"
    assert record["state"] == {"first": {"said": "hi"}, "second": {"said": "hi"}}
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    assert [(c["tool"], c["status"], c["attempts"]) for c in calls] == [("echo", "done", 1)] * 2
    assert calls[1]["depends_on"] == [calls[0]["id"]] and calls[0]["depends_on"] == []
    assert calls[0]["output_path"] == "†state.first" and calls[0]["duration_ms"] is not None
    history = api.request("GET", f"/v1/jobs/{job_id}/history").json()
    assert history["role"] == "assistant"
    tool_calls = [p for p in history["parts"] if p["activity_type"] == "tool_call"]
    assert [p["tools"][0]["id"] for p in tool_calls] == [c["id"] for c in calls]
    assert [p["results"][0]["content"] for p in tool_calls] == ['{"said": "hi"}'] * 2
    assert all("technical_details" not in p for p in history["parts"] + history["activity_parts"])
    assert [a["type"] for a in history["activity_parts"]] == [p["activity_type"] for p in history["parts"]]


def test_the_job_list_is_newest_first_filters_by_status_and_limits(harness, echo, serve_api):
    api = serve_api()
    ok = [api.request("POST", "/v1/jobs", json_body=chain(f"job {i}")).json()["id"] for i in range(3)]
    bad = api.request("POST", "/v1/jobs", json_body={"calls": [{"_tool": "boom", "_outputPath": "†state.x"}]})
    for job_id in [*ok, bad.json()["id"]]:
        finished(api, job_id)
    listed = api.request("GET", "/v1/jobs").json()
    assert [r["id"] for r in listed] == [bad.json()["id"], *reversed(ok)]
    assert [r["id"] for r in api.request("GET", "/v1/jobs?status=failed").json()] == [bad.json()["id"]]
    assert [r["id"] for r in api.request("GET", "/v1/jobs?status=succeeded&limit=2").json()] == ok[:0:-1]
    wrong = api.request("GET", "/v1/jobs?status=sleeping&limit=0")
    assert wrong.status == 422
    assert {p["pointer"] for p in wrong.json()["error"]["problems"]} == {"/query/status", "/query/limit"}


def test_cancel_answers_the_record_after_the_cancel(harness, echo, serve_api):
    api = serve_api()
    job = {"calls": [{"_tool": "gate", "text": "a", "_outputPath": "†state.a"},
                     {"_tool": "echo", "text": "†state.a.passed", "_outputPath": "†state.b"}]}
    job_id = api.request("POST", "/v1/jobs", json_body=job).json()["id"]
    assert echo.entered.wait(20)
    canceled = api.request("POST", f"/v1/jobs/{job_id}/cancel")
    assert canceled.status == 200 and canceled.json()["status"] == "canceled"
    echo.opened.set()
    assert api.request("POST", "/v1/jobs/nope/cancel").status == 404


def test_unknown_jobs_and_calls_are_404_with_the_error_shape(harness, echo, serve_api):
    api = serve_api()
    for path in ("/v1/jobs/nope", "/v1/jobs/nope/calls", "/v1/jobs/nope/history", "/v1/jobs/nope/events",
                 "/v1/jobs/bad%20id!", "/v1/jobs/%7Bx%7D/calls"):
        answer = api.request("GET", path)
        assert answer.status == 404, (path, answer.body)
        assert answer.json()["error"]["type"] == "JobNotFound"
    job_id = api.request("POST", "/v1/jobs", json_body=chain("x")).json()["id"]
    missing = api.request("POST", f"/v1/jobs/{job_id}/calls/call_nope/approve")
    assert (missing.status, missing.json()["error"]["type"]) == (404, "CallNotFound")
    assert api.request("GET", "/v1/nothing").status == 404
    assert api.request("DELETE", "/v1/jobs").status == 405


# ------------------------------------------------------------------------------------------ approvals


def test_approve_reject_and_edit_over_http(harness, echo, serve_api):
    api = serve_api()
    job = {"calls": [{"_tool": "echo", "text": "one", "_outputPath": "†state.one"},
                     {"_tool": "echo", "text": "two", "_outputPath": "†state.two || †state.twoFailed"},
                     {"_tool": "echo", "text": "three", "_outputPath": "†state.three"}],
           "options": {"approval": ["echo"]}}
    job_id = api.request("POST", "/v1/jobs", json_body=job).json()["id"]
    one, two, three = (c["id"] for c in api.request("GET", f"/v1/jobs/{job_id}/calls").json())
    assert api.request("GET", f"/v1/jobs/{job_id}").json()["status"] == "awaiting_approval"

    approved = api.request("POST", f"/v1/jobs/{job_id}/calls/{one}/approve")
    assert approved.status == 200 and approved.json()["id"] == one
    assert approved.json()["status"] in ("ready", "running", "done")
    again = api.request("POST", f"/v1/jobs/{job_id}/calls/{one}/approve")
    assert again.status == 409 and again.json()["error"]["type"] == "Conflict"

    bad_edit = api.request("POST", f"/v1/jobs/{job_id}/calls/{three}/edit", json_body={"params": {"text": 5}})
    assert bad_edit.status == 422
    assert [p["pointer"] for p in bad_edit.json()["error"]["problems"]] == ["/params/text"]
    no_params = api.request("POST", f"/v1/jobs/{job_id}/calls/{three}/edit", json_body={"parms": {}})
    assert no_params.status == 422
    assert {p["pointer"] for p in no_params.json()["error"]["problems"]} == {"/parms", "/params"}
    edited = api.request("POST", f"/v1/jobs/{job_id}/calls/{three}/edit", json_body={"params": {"text": "3!"}})
    assert edited.status == 200, edited.body

    wrong_reason = api.request("POST", f"/v1/jobs/{job_id}/calls/{two}/reject", json_body={"reason": 7})
    assert wrong_reason.status == 422
    rejected = api.request("POST", f"/v1/jobs/{job_id}/calls/{two}/reject", json_body={"reason": "not today"})
    assert rejected.status == 200
    assert rejected.json()["error"] == {"type": "Rejected", "message": "rejected by reviewer: not today"}
    record = finished(api, job_id)
    assert record["status"] == "succeeded", record
    assert record["state"]["one"] == {"said": "one"} and record["state"]["three"] == {"said": "3!"}
    assert record["state"]["twoFailed"]["error"]["message"] == "rejected by reviewer: not today"


# --------------------------------------------------------------------------------- invalid requests


@pytest.mark.parametrize(("body", "status", "error_type", "pointer"), [
    (b"{\"calls\": [", 400, "MalformedJSON", ""),
    (b"\xff\xfe{}", 400, "MalformedJSON", ""),
    (b"", 400, "MalformedJSON", ""),
    (b"[" * 5000 + b"]" * 5000, 422, "JobValidationError", ""),
    (json.dumps({"context": "nope", "calls": [{"_tool": "echo", "text": 5}]}).encode(), 422, "JobValidationError",
     "/calls/0/text"),
    (json.dumps([1, 2]).encode(), 422, "JobValidationError", ""),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"budget": {"max_requests": -1}}}).encode(),
     422, "JobValidationError", "/options/budget/max_requests"),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"cache_ttl": "1d"}}).encode(), 422,
     "JobValidationError", "/options/cache_ttl"),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"priority": "urgent"}}).encode(), 422,
     "JobValidationError", "/options/priority"),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"priority": None}}).encode(), 422,
     "JobValidationError", "/options/priority"),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"model": ""}}).encode(), 422,
     "JobValidationError", "/options/model"),
    (json.dumps({"calls": [{"_tool": "echo", "text": "x"}], "options": {"stream_markers": False}}).encode(), 422,
     "JobValidationError", "/options/stream_markers"),
    (json.dumps({"context": [], "tools": [{"type": "object", "x-model": "claude-unknown-1", "properties": {
        "_tool": {"const": "cheap"}, "_output": {"type": "string"}}}]}).encode(), 422, "JobValidationError",
     "/tools/0/x-model"),
])
def test_invalid_bodies_are_answered_4xx_with_every_problem_and_nothing_written(harness, echo, serve_api, body,
                                                                                status, error_type, pointer):
    api = serve_api()
    before = raw_keys(harness)
    answer = api.request("POST", "/v1/jobs", body=body, headers={"Content-Type": "application/json"})
    assert answer.status == status, answer.body
    error = answer.json()["error"]
    assert error["type"] == error_type
    assert pointer in [p["pointer"] for p in error["problems"]]
    assert raw_keys(harness) == before


def test_a_job_with_several_problems_names_each_with_its_pointer(harness, echo, serve_api):
    api = serve_api()
    job = {"context": [{"type": "nonsense"}], "calls": [{"_tool": "echo"}, {"_tool": "nope"}], "bogus": 1}
    answer = api.request("POST", "/v1/jobs", json_body=job)
    assert answer.status == 422
    pointers = {p["pointer"] for p in answer.json()["error"]["problems"]}
    assert {"/context/0/type", "/calls/0", "/calls/1/_tool", "/bogus"} <= pointers, pointers


def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(harness, echo, serve_api):
    api = serve_api(max_job_bytes=10_000)
    before = raw_keys(harness)
    big = json.dumps({"calls": [{"_tool": "echo", "text": "x" * 20_000}]}).encode()
    declared = api.request("POST", "/v1/jobs", body=big)
    assert declared.status == 413 and declared.json()["error"]["type"] == "PayloadTooLarge"
    assert "10000" in declared.json()["error"]["problems"][0]["message"]

    import http.client

    # chunked: no Content-Length, the limit is found as the body arrives. The rest of the body is read before the
    # answer, so a client still sending (here 2 MB after the first 10 KB) gets its 413 rather than a broken pipe
    huge = big + b" " * 2_000_000
    for _ in range(3):
        connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
        try:
            connection.request("POST", "/v1/jobs", body=iter([huge[i:i + 4096] for i in range(0, len(huge), 4096)]),
                               headers={**api.headers(), "Content-Type": "application/json"}, encode_chunked=True)
            streamed = connection.getresponse()
            assert streamed.status == 413, streamed.read()
        finally:
            connection.close()
    assert raw_keys(harness) == before


# ----------------------------------------------------------------------------------------------- auth


def test_every_path_but_health_needs_a_token(harness, echo, serve_api):
    api = serve_api(tokens=["alpha", "beta"])
    job_id = api.request("POST", "/v1/jobs", json_body=chain("x"), token="beta").json()["id"]
    paths = ["/v1/jobs", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/calls", f"/v1/jobs/{job_id}/history",
             f"/v1/jobs/{job_id}/events", "/v1/tools", "/v1/activities", "/v1/ready", "/v1/examples",
             "/openapi.json", "/docs", "/", f"/jobs/{job_id}", "/static/job.html"]
    for path in paths:
        for token in (None, "gamma"):
            answer = api.request("GET", path, token=token)
            assert answer.status == 401, (path, token, answer.status)
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.json()["error"]["type"] == "Unauthorized"
    assert api.request("POST", "/v1/jobs", json_body=chain("x"), token=None).status == 401
    assert api.request("GET", "/v1/health", token=None).status == 200
    assert api.request("GET", "/v1/jobs", token="alpha").status == 200
    assert api.request("GET", f"/v1/jobs/{job_id}/events?token=alpha", token=None).status == 200
    assert api.request("GET", f"/v1/jobs/{job_id}?token=alpha", token=None).status == 401  # only the stream


def test_no_auth_turns_auth_off_explicitly(harness, echo, serve_api):
    api = serve_api(auth_enabled=False)
    assert api.request("GET", "/v1/jobs", token=None).status == 200
    assert api.request("POST", "/v1/jobs", json_body=chain("x"), token=None).status == 201


def test_the_page_trades_its_token_for_an_httponly_cookie_and_cross_site_writes_are_refused(harness, echo,
                                                                                            serve_api):
    api = serve_api(tokens=["page-secret"])
    traded = api.request("GET", "/?token=page-secret&x=1", token=None)
    assert traded.status == 303 and traded.headers["location"] == "/?x=1"
    cookie = traded.headers["set-cookie"]
    assert cookie.startswith("agentq_token=page-secret;") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert api.request("GET", "/?token=wrong", token=None).status == 401
    jar = {"Cookie": "agentq_token=page-secret"}
    page = api.request("GET", "/", token=None, headers=jar)
    assert page.status == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert api.request("GET", "/v1/jobs", token=None, headers=jar).status == 200
    same_site = api.request("POST", "/v1/jobs", json_body=chain("x"), token=None,
                            headers={**jar, "Sec-Fetch-Site": "same-origin"})
    assert same_site.status == 201
    cross_site = api.request("POST", "/v1/jobs", json_body=chain("x"), token=None,
                             headers={**jar, "Sec-Fetch-Site": "cross-site"})
    assert cross_site.status == 403
    other_origin = api.request("POST", "/v1/jobs", json_body=chain("x"), token=None,
                               headers={**jar, "Origin": "http://evil.example"})
    assert other_origin.status == 403


# --------------------------------------------------------------------------------------------- fleet


def test_tools_activities_ready_examples_and_the_openapi_document(harness, echo, serve_api):
    api = serve_api()
    tools = api.request("GET", "/v1/tools").json()
    assert tools["tools"]["echo"] == {"activity": "echo", "live": True, "known": True}
    composed = tools["solution"]["properties"]["calls"]["items"]["anyOf"]
    assert {t["properties"]["_tool"]["const"] for t in composed} == {"echo", "gate", "boom"}
    activities = api.request("GET", "/v1/activities").json()
    assert activities["echo"]["live"] is True and activities["echo"]["workers"]
    assert api.request("GET", "/v1/ready").json() == {"status": "ready"}
    assert "demo_order" in api.request("GET", "/v1/examples").json()
    document = api.request("GET", "/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/jobs/{job_id}/calls/{call_id}/edit",
            "/v1/health"} <= set(document["paths"])
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert api.request("GET", "/docs").status == 200


def test_ready_is_503_when_the_state_store_is_down(harness, serve_api):
    from tests.api_server import free_port

    api = serve_api(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    assert api.request("GET", "/v1/health").status == 200
    ready = api.request("GET", "/v1/ready")
    assert ready.status == 503 and ready.json()["error"]["type"] == "StoreUnavailable"
    assert api.request("GET", "/v1/jobs/x").status == 503  # a dependency down is not a client's mistake


# -------------------------------------------------------------------------------------- idempotency


def test_the_same_idempotency_key_returns_the_same_job(harness, echo, serve_api) -> None:
    api = serve_api()
    key = {"Idempotency-Key": "order-42"}
    first = api.request("POST", "/v1/jobs", json_body=chain("once"), headers=key)
    assert first.status == 201
    job_id = first.json()["id"]
    replays: list[Any] = []
    threads = [threading.Thread(target=lambda: replays.append(
        api.request("POST", "/v1/jobs", json_body=chain("once"), headers=key))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {(r.status, r.json()["id"], r.headers.get("idempotent-replayed")) for r in replays} == {
        (200, job_id, "true")}
    reused = api.request("POST", "/v1/jobs", json_body=chain("twice"), headers=key)
    assert reused.status == 422 and reused.json()["error"]["type"] == "IdempotencyKeyReused"
    finished(api, job_id)
    assert len(api.request("GET", "/v1/jobs").json()) == 1
    other = api.request("POST", "/v1/jobs", json_body=chain("once"), headers={"Idempotency-Key": "order-43"})
    assert other.status == 201 and other.json()["id"] != job_id


def test_concurrent_first_requests_with_one_key_create_one_job(harness, echo, serve_api) -> None:
    api = serve_api()
    answers: list[Any] = []
    barrier = threading.Barrier(6)

    def post() -> None:
        barrier.wait()
        answers.append(api.request("POST", "/v1/jobs", json_body=chain("race"), headers={"Idempotency-Key": "r"}))

    threads = [threading.Thread(target=post) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({a.json()["id"] for a in answers}) == 1
    assert sorted(a.status for a in answers).count(201) == 1


# ------------------------------------------------------------------------------------- event stream


def gated_job(api: ApiServer) -> str:
    """A job that publishes some events, then waits at a gate, then publishes more."""
    job = {"calls": [{"_tool": "echo", "text": "a", "_outputPath": "†state.a"},
                     {"_tool": "gate", "text": "†state.a.said", "_outputPath": "†state.b"},
                     {"_tool": "echo", "text": "†state.b.passed", "_outputPath": "†state.c"}]}
    return str(api.request("POST", "/v1/jobs", json_body=job).json()["id"])


def test_the_event_stream_sends_ids_names_and_envelopes_without_technical_details(harness, echo, serve_api):
    api = serve_api()
    echo.opened.set()
    job_id = gated_job(api)
    messages = list(api.sse(f"/v1/jobs/{job_id}/events"))
    assert messages[0].retry == 2000 and messages[0].data is None
    events = messages[1:]
    stored = store_of(harness.client()).read_events(job_id)
    assert [(m.id, m.event) for m in events] == [(entry_id, envelope["event"]) for entry_id, envelope in stored]
    for message, (_, envelope) in zip(events, stored, strict=True):
        sent = message.json()
        assert sent["event"] == message.event
        if envelope.get("part"):
            assert "technical_details" not in sent["part"]
            assert {k: v for k, v in envelope["part"].items() if k != "technical_details"} == sent["part"]
    assert events[-1].event == "job.finished"
    whole = api.request("GET", f"/v1/jobs/{job_id}/events")
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert whole.headers["x-accel-buffering"] == "no" and whole.headers["cache-control"] == "no-cache"


def test_a_reconnect_with_last_event_id_receives_exactly_the_missed_events(harness, echo, serve_api):
    api = serve_api()
    job_id = gated_job(api)
    first = list(api.sse(f"/v1/jobs/{job_id}/events", stop_after=4))  # retry hint + 3 events, then a drop
    assert echo.entered.wait(20)
    echo.opened.set()  # the job goes on while the client is away
    last = first[-1].id
    assert last is not None
    rest = list(api.sse(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": last}))
    also = list(api.sse(f"/v1/jobs/{job_id}/events?after={last}"))
    everything = [(m.id, m.event) for m in api.sse(f"/v1/jobs/{job_id}/events") if m.id]
    received = [(m.id, m.event) for m in first + rest if m.id]
    assert received == everything  # nothing lost, nothing twice, in order
    assert [(m.id, m.event) for m in also if m.id] == [(m.id, m.event) for m in rest if m.id]
    assert rest[-1].event == "job.finished"
    after_end = api.request("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": everything[-1][0]})
    assert after_end.status == 204  # an EventSource stops reconnecting
    bad = api.request("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "yesterday"})
    assert bad.status == 422 and bad.json()["error"]["problems"][0]["pointer"] == "/headers/Last-Event-ID"


def test_a_follower_sees_events_of_a_running_job_as_they_happen(harness, echo, serve_api) -> None:
    api = serve_api()
    job_id = gated_job(api)
    seen: list[SseMessage] = []
    stream = api.sse(f"/v1/jobs/{job_id}/events")
    for message in stream:
        seen.append(message)
        if message.event == "call.started" and message.json()["tool"] == "gate":
            echo.opened.set()  # the stream shows the gate's start while the job waits there
    assert seen[-1].event == "job.finished"
    assert [m.json()["tool"] for m in seen if m.event == "call.finished"] == ["echo", "gate", "echo"]


def parts_of(messages: list[SseMessage]) -> list[dict]:
    return [m.json() for m in messages if m.data is not None]


def test_the_parts_format_sends_seed_004_parts_with_legacy_markers(harness, echo, serve_api):
    api = serve_api()
    echo.opened.set()
    job_id = gated_job(api)
    with_markers = list(api.sse(f"/v1/jobs/{job_id}/events?format=parts"))
    without = list(api.sse(f"/v1/jobs/{job_id}/events?format=parts&markers=false"))
    plain = parts_of(without)
    assert all(p["type"] in ("activity", "text_output_stream") for p in plain)
    assert all("technical_details" not in p for p in plain)
    assert not any(p.get("text", "").startswith(STREAM_MARKER_PREFIX) for p in plain)
    assert [p["activity_type"] for p in plain if p["type"] == "activity"].count("tool_request") == 3
    marked = parts_of(with_markers)
    assert len(marked) == 2 * len([p for p in plain if p["type"] == "activity"])
    for part, marker in zip(marked[::2], marked[1::2], strict=True):  # each activity, then its marker
        assert part["type"] == "activity"
        assert marker["type"] == "text_output_stream"
        assert json.loads(marker["text"][len(STREAM_MARKER_PREFIX):]) == legacy_activity(part)
    ids = [m.id for m in with_markers if m.data is not None]
    assert ids[0].endswith(";part") and not ids[1].endswith(";part")
    # a client that lost the connection between a part and its marker gets the marker, then what follows
    resumed = list(api.sse(f"/v1/jobs/{job_id}/events?format=parts", headers={"Last-Event-ID": ids[0]}))
    assert parts_of(resumed) == marked[1:]


def test_many_followers_of_many_jobs_share_the_hub_and_all_see_every_event(harness, echo, serve_api) -> None:
    api = serve_api()
    jobs = [gated_job(api) for _ in range(3)]
    results: dict[int, list[str]] = {}

    def follow(n: int, job_id: str) -> None:
        results[n] = [m.event or "" for m in api.sse(f"/v1/jobs/{job_id}/events") if m.event]

    threads = [threading.Thread(target=follow, args=(n, jobs[n % 3])) for n in range(12)]
    for thread in threads:
        thread.start()
    wait_until(lambda: api.app.state.store.hub.followed == 3, "the hub to follow the three jobs")
    echo.opened.set()
    for thread in threads:
        thread.join(60)
    assert len(results) == 12
    for n, events in results.items():
        assert events[-1] == "job.finished", (n, events)
        assert events == results[n % 3]  # every follower of a job saw the same events


def test_events_of_a_job_awaiting_a_reviewer_keep_the_stream_open_with_keepalive(harness, echo, serve_api,
                                                                                  monkeypatch) -> None:
    import fastapi.routing

    monkeypatch.setattr(fastapi.routing, "_PING_INTERVAL", 0.2)
    api = serve_api()
    job_id = api.request("POST", "/v1/jobs", json_body={**chain("held"), "options": {"approval": ["echo"]}}).json()[
        "id"]
    call_id = api.request("GET", f"/v1/jobs/{job_id}/calls").json()[0]["id"]
    seen: list[SseMessage] = []
    for message in api.sse(f"/v1/jobs/{job_id}/events"):
        seen.append(message)
        if message.comments and not any(m.event == "call.started" for m in seen):
            # a keep-alive arrived while the job waited: now let it go on
            api.request("POST", f"/v1/jobs/{job_id}/calls/{call_id}/approve")
    assert any("ping" in c for m in seen for c in m.comments)
    assert seen[-1].event == "job.finished"


def test_metrics_are_served_with_auth_in_prometheus_text(harness, echo, serve_api):
    api = serve_api()
    job_id = api.request("POST", "/v1/jobs", json_body=chain("counted")).json()["id"]
    finished(api, job_id)
    assert api.request("GET", "/metrics", token=None).status == 401
    answer = api.request("GET", "/metrics")
    assert answer.status == 200 and answer.headers["content-type"].startswith("text/plain")
    counted = ('agentq_calls_total{activity="echo",status="done",tenant="default"}',
               'agentq_jobs_total{status="succeeded",tenant="default"}')

    def scraped() -> str | None:  # a job's end is counted just after the step that ended it, a call after its commit
        text = api.request("GET", "/metrics").body.decode()
        return text if all(c in text for c in counted) else None

    text = wait_until(scraped, "the job and its call to be counted")
    assert "agentq_call_duration_seconds_bucket" in text and job_id not in text
