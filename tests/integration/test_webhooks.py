"""Signed webhooks (docs/webhooks.md) through real Redis, real Celery workers and a real HTTP receiver on loopback that
checks every request with the Standard Webhooks algorithm (tests/integration/webhook_receiver.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import datetime

import pytest
from pydantic import SecretStr

from agentq.async_client import AsyncClient
from agentq.client import Client
from agentq.errors import JobValidationError
from agentq.settings import Settings
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import wait_for
from tests.integration.webhook_receiver import SECRET, Receiver

FAST = {"webhook_allowlist": ["127.0.0.1"], "webhook_secret": SecretStr(SECRET), "webhook_backoff_s": 0.2,
        "webhook_poll_s": 0.1, "webhook_timeout_s": 3.0}
FAST_ENV = {"AGENTQ_WEBHOOK_ALLOWLIST": "127.0.0.1", "AGENTQ_WEBHOOK_SECRET": SECRET,
            "AGENTQ_WEBHOOK_BACKOFF_S": "0.3", "AGENTQ_WEBHOOK_POLL_S": "0.1", "AGENTQ_WEBHOOK_TIMEOUT_S": "3"}


class HooksHarness(Harness):
    """A harness that also starts webhook receivers (`receiver(script)`), closed with it."""

    receiver: Callable[..., Receiver]


@pytest.fixture
def hooks(redis_url: str) -> Iterator[HooksHarness]:
    h = HooksHarness(redis_url, **FAST)
    receivers: list[Receiver] = []

    def receiver(script: list[int] | None = None) -> Receiver:
        r = Receiver(script)
        receivers.append(r)
        return r

    h.receiver = receiver
    try:
        yield h
    finally:
        h.close()
        for r in receivers:
            r.close()


def _add_job(url: str, events: list[str] | None = None, **extra) -> dict:
    webhook = {"url": url, **({"events": events} if events else {})}
    return {"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"}],
            "options": {"webhook": webhook, **extra}}


def _serve_add(h: Harness) -> None:
    h.tool("add", params={"a": {"type": "number"}, "b": {"type": "number"}})
    h.activities.register("add", lambda call: call["a"] + call["b"])
    h.worker()


def test_job_finished_is_signed_retried_after_two_500s_and_keeps_one_id(hooks):
    receiver = hooks.receiver([500, 500])
    _serve_add(hooks)
    handle = hooks.client().submit(_add_job(receiver.url))
    record = handle.result(timeout=20)
    got = receiver.wait(3)
    assert [r.answered for r in got] == [500, 500, 200]
    assert all(r.verified for r in got), [r.headers for r in got]
    assert len({r.headers["webhook-id"] for r in got}) == 1
    assert got[0].headers["webhook-id"].startswith("msg_")
    assert len({r.body for r in got}) == 1  # every attempt sends the same body; only its timestamp is new
    payload = got[-1].payload
    assert payload["type"] == "job.finished"
    assert payload["data"]["id"] == handle.id and payload["data"]["status"] == "succeeded"
    assert payload["data"]["result"] == {"sum": 3} == record["result"]
    assert payload["timestamp"] == record["finished_at"]

    deliveries = wait_for(lambda: [d for d in handle.deliveries() if d["state"] == "delivered"], 10, "delivered")
    (delivery,) = deliveries
    assert delivery["id"] == got[0].headers["webhook-id"] and delivery["type"] == "job.finished"
    assert [a["status"] for a in delivery["attempts"]] == [500, 500, 200]
    assert delivery["attempts"][0]["error"] == "answered 500" and delivery["next_attempt_at"] is None
    assert len(receiver.received) == 3  # nothing after the 2xx
    counted = {outcome: hooks.metrics.registry.get_sample_value(
        "agentq_webhook_attempts_total", {"type": "job.finished", "outcome": outcome}) for outcome in ("retry",
                                                                                                  "delivered")}
    assert counted == {"retry": 2.0, "delivered": 1.0}

    async def listed() -> list[dict]:
        async with AsyncClient(settings=hooks.settings) as client:
            return await (await client.job(handle.id)).deliveries()

    assert asyncio.run(listed()) == deliveries


def test_a_tampered_body_fails_the_receivers_check(hooks):
    """The receiver's check can fail: the same request with one byte changed, or another secret, is refused."""
    from tests.integration.webhook_receiver import verify

    receiver = hooks.receiver()
    _serve_add(hooks)
    hooks.client().submit(_add_job(receiver.url)).result(timeout=20)
    (got,) = receiver.wait(1)
    assert verify(SECRET, got.headers, got.body)
    assert not verify(SECRET, got.headers, got.body.replace(b"succeeded", b"succeedeD"))
    assert not verify("whsec_" + "QUJD" * 8, got.headers, got.body)


def test_call_events_are_delivered_with_the_call(hooks):
    receiver = hooks.receiver()
    hooks.tool("add", params={"a": {"type": "number"}, "b": {"type": "number"}})
    hooks.activities.register("add", lambda call: call["a"] + call["b"])
    hooks.worker()
    client = hooks.client()
    handle = client.submit(_add_job(receiver.url, ["call.awaiting_approval", "call.finished", "job.finished"],
                                    approval=["add"]))
    waiting = receiver.delivered(lambda r: r.payload["type"] == "call.awaiting_approval")
    call = waiting.payload["data"]
    assert call["job_id"] == handle.id and call["tool"] == "add" and call["status"] == "awaiting_approval"
    assert call["params"] == {"a": 1, "b": 2}
    handle.approve(call["id"])
    finished = receiver.delivered(lambda r: r.payload["type"] == "call.finished")
    assert finished.payload["data"]["id"] == call["id"] and finished.payload["data"]["status"] == "done"
    receiver.delivered(lambda r: r.payload["type"] == "job.finished")
    assert all(r.verified for r in receiver.received)
    types = sorted(d["type"] for d in wait_for(lambda: _all_delivered(handle, 3), 10, "three deliveries"))
    assert types == ["call.awaiting_approval", "call.finished", "job.finished"]
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 3


def _all_delivered(handle, count: int) -> list[dict] | None:
    found = handle.deliveries()
    return found if len(found) == count and all(d["state"] == "delivered" for d in found) else None


def test_webhooks_outside_the_allowlist_are_refused_at_submit_and_nothing_is_written(hooks, redis_url):
    client = Client(settings=Settings(redis_url=redis_url, webhook_allowlist=["127.0.0.1", "*.example.com",
                                                                              "10.0.0.0/8"]))
    job = {"calls": [], "options": {"webhook": {"url": "https://hooks.other.org/x"}}}
    bad = [
        ("https://hooks.other.org/x", "/options/webhook/url", "not in the webhook allowlist"),
        ("http://a.example.com/x", "/options/webhook/url", "must be https"),
        ("https://192.168.1.4/x", "/options/webhook/url", "not in the webhook allowlist"),
        ("https://[::1]/x", "/options/webhook/url", "not in the webhook allowlist"),
        ("https://localhost/x", "/options/webhook/url", "not in the webhook allowlist"),
        ("ftp://a.example.com/x", "/options/webhook/url", "http(s) URL"),
        ("https://user:pw@a.example.com/x", "/options/webhook/url", "credentials"),
        ("https://a.example.com:99999/x", "/options/webhook/url", "not a valid URL"),
        (42, "/options/webhook/url", "http(s) URL"),
    ]
    store = store_of(client)
    for url, pointer, message in bad:
        job["options"]["webhook"] = {"url": url}
        with pytest.raises(JobValidationError) as caught:
            client.submit(job, job_id="refused")
        problems = caught.value.to_dict()["problems"]
        assert [p["pointer"] for p in problems] == [pointer], (url, problems)
        assert message in problems[0]["message"], (url, problems)
    # every problem at once, with the job's other problems
    job = {"calls": [], "options": {"max_ticks": 0, "webhook": {"url": "http://a.example.com/", "events": [
        "job.finished", "job.started"], "secret": "x"}}}
    with pytest.raises(JobValidationError) as caught:
        client.submit(job, job_id="refused")
    assert sorted(p["pointer"] for p in caught.value.to_dict()["problems"]) == [
        "/options/max_ticks", "/options/webhook/events/1", "/options/webhook/secret", "/options/webhook/url"]
    # a private address is allowed only when the allowlist names it (here through 10.0.0.0/8), https or not
    assert client.submit({"calls": [], "options": {"webhook": {"url": "https://10.1.2.3/x"}}}).id
    assert store.redis.exists("agentq:{refused}:job") == 0
    assert store.redis.zscore("agentq:webhooks:jobs", "refused") is None
    client.close()


def test_a_submitter_without_an_allowlist_refuses_every_webhook(harness):
    client = harness.client()
    with pytest.raises(JobValidationError) as caught:
        client.submit({"calls": [], "options": {"webhook": {"url": "https://hooks.example.com/"}}})
    (problem,) = caught.value.to_dict()["problems"]
    assert problem["pointer"] == "/options/webhook/url" and "the webhook allowlist is empty" in problem["message"]


def test_a_delivery_survives_its_process_dying_mid_retry(worker_procs, redis_url):
    """The worker that made the failed attempts is killed; the retry due while no process runs is sent by the
    worker started after, with the same id."""
    receiver = Receiver([500] * 1000)
    try:
        first = worker_procs.start(["procEcho"], **FAST_ENV)
        worker_procs.wait_live(first, ["procEcho"])
        settings = Settings(redis_url=redis_url, webhook_allowlist=["127.0.0.1"])
        with Client(settings=settings) as client:
            handle = client.submit({"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}],
                                    "options": {"webhook": {"url": receiver.url}}})
            handle.result(timeout=20)
            receiver.wait(2)
            first.kill()
            with receiver.lock:
                receiver.script = []  # answers 200 from now on
                tried = len(receiver.received)
            (pending,) = handle.deliveries()
            due_at = datetime.fromisoformat(pending["next_attempt_at"].replace("Z", "+00:00")).timestamp()
            wait_for(lambda: time.time() > due_at + 0.3, 10, "the next attempt to fall due while no process runs")
            assert len(receiver.received) == tried and pending["state"] == "pending"
            second = worker_procs.start(["procEcho"], **FAST_ENV)
            got = receiver.delivered(lambda r: True, timeout=30)
            assert got.verified and got.payload["type"] == "job.finished"
            assert {r.headers["webhook-id"] for r in receiver.received} == {got.headers["webhook-id"]}
            delivered = wait_for(lambda: [d for d in handle.deliveries() if d["state"] == "delivered"], 10, "state")
            assert delivered[0]["attempts"][-1]["status"] == 200
            assert second.alive()
    finally:
        receiver.close()


def test_webhooks_on_a_redis_cluster(cluster_harness, local_cluster):
    """Every webhook step keeps the cluster rule: jobs on two nodes, their events delivered from a third slot's
    fleet-wide keys."""
    from tests.integration.test_cluster import ids_on_nodes

    h = cluster_harness
    h.settings = h.settings.model_copy(update=FAST)
    receiver = Receiver([500])
    h.on_close(receiver.close)
    _serve_add(h)
    client = h.client()
    ids = ids_on_nodes(local_cluster, "hook", local_cluster.ports[:2])
    handles = [client.submit(_add_job(receiver.url, ["call.finished", "job.finished"]), job_id=job_id)
               for job_id in ids]
    for handle in handles:
        assert handle.result(timeout=30)["status"] == "succeeded"
        done = wait_for(lambda handle=handle: _all_delivered(handle, 2), 20, f"deliveries of {handle.id}")
        assert sorted(d["type"] for d in done) == ["call.finished", "job.finished"]
    finished = {r.payload["data"]["id"] for r in receiver.received if r.payload["type"] == "job.finished"}
    assert finished == set(ids) and all(r.verified for r in receiver.received)


def _sender(allow: list[str], timeout_s: float = 3.0):
    from agentq.webhooks.sender import Sender
    from agentq.webhooks.signing import secret_keys
    from agentq.webhooks.targets import Allowlist

    return Sender(Allowlist.parse(allow), keys=secret_keys(SECRET), timeout_s=timeout_s)


def _delivery(url: str):
    from agentq.webhooks.records import Delivery

    return Delivery(id="msg_test", job_id="j", type="job.finished", url=url, created_at=time.time())


def test_a_listed_name_resolving_to_loopback_is_refused_and_the_connection_goes_to_the_checked_address(
        monkeypatch):
    """DNS is faked for one name only: `hooks.test` resolves to 127.0.0.1. Listed by name alone, the attempt is
    refused before any connection; with the address listed too, it is delivered (to the checked address: the
    name resolves nowhere else)."""
    import socket

    receiver = Receiver()
    real = socket.getaddrinfo
    port = receiver.server.server_address[1]

    def fake(host, *args, **kwargs):
        return real("127.0.0.1", *args, **kwargs) if host == "hooks.test" else real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    url = f"http://hooks.test:{port}/hook"
    try:
        refused = _sender(["hooks.test"]).send(_delivery(url), b"{}")
        assert refused.status is None and "resolves to 127.0.0.1" in (refused.error or ""), refused
        assert receiver.received == []
        answer = _sender(["hooks.test", "127.0.0.1"]).send(_delivery(url), b'{"a":1}')
        assert answer.delivered, answer
        (got,) = receiver.received
        assert got.verified and got.headers["host"] == f"hooks.test:{port}" and got.body == b'{"a":1}'
    finally:
        receiver.close()


def test_redirects_are_not_followed_and_a_slow_receiver_times_out():
    redirecting, slow = Receiver([302]), Receiver(delay_s=2.0)
    try:
        answer = _sender(["127.0.0.1"]).send(_delivery(redirecting.url), b"{}")
        assert answer.status == 302 and not answer.delivered and "not followed" in (answer.error or "")
        assert len(redirecting.received) == 1
        started = time.monotonic()
        answer = _sender(["127.0.0.1"], timeout_s=0.5).send(_delivery(slow.url), b"{}")
        assert answer.status is None and "Timeout" in (answer.error or ""), answer
        assert time.monotonic() - started < 1.8
    finally:
        redirecting.close()
        slow.close()


def test_a_receiver_that_hangs_does_not_hold_up_other_deliveries(hooks):
    """One receiver holds its request (within a 20 s timeout); another job's delivery goes meanwhile."""
    import threading

    hooks.settings = hooks.settings.model_copy(update={"webhook_timeout_s": 20.0})
    hanging, fast = hooks.receiver(), hooks.receiver()
    hanging.hold = threading.Event()
    _serve_add(hooks)
    client = hooks.client()
    try:
        client.submit(_add_job(hanging.url)).result(timeout=20)
        hanging.wait(1)  # its request arrived and is held
        other = client.submit(_add_job(fast.url))
        got = fast.delivered(lambda r: True, timeout=8)
        assert got.payload["data"]["id"] == other.id
    finally:
        hanging.hold.set()


def test_failed_and_canceled_jobs_send_job_finished_with_their_status_and_error(hooks):
    receiver = hooks.receiver()
    hooks.tool("boom", params={})
    hooks.activities.register("boom", lambda call: (_ for _ in ()).throw(ValueError("no luck")), retries=0)
    _serve_add(hooks)
    client = hooks.client()
    failed = client.submit({"calls": [{"_tool": "boom", "_outputPath": "†state.x"}],
                            "options": {"webhook": {"url": receiver.url}}})
    waiting = client.submit(_add_job(receiver.url, approval=["add"]))
    assert failed.result(timeout=20)["status"] == "failed"
    waiting.cancel()
    by_job = {}
    for job in (failed, waiting):
        got = receiver.delivered(lambda r, job=job: r.payload["data"]["id"] == job.id)
        assert got.verified and got.payload["type"] == "job.finished"
        by_job[job.id] = got.payload["data"]
    assert by_job[failed.id]["status"] == "failed" and "no luck" in by_job[failed.id]["error"]["message"]
    assert by_job[waiting.id]["status"] == "canceled" and by_job[waiting.id]["result"] is None
