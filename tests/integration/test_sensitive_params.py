"""Sensitive parameters end to end: the demo's order job (its `chargePayment` tool marks `/card/number`) on a real
`agentq worker -m workers` process and the private Redis. The charges go through with the real numbers (the
activity's results carry their last four digits), and nothing agentq shows of the job — events with their
technical details, the history, the calls view, the job record — contains a card number."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from agentq.client import Client
from agentq.protocol.history import build_history_message
from agentq.protocol.sensitive import REDACTED

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

NUMBERS = ("4242 4242 4242 4242", "4000 0000 0000 0000")  # the demo job's two cards


def test_the_demo_order_job_charges_real_numbers_and_shows_them_masked(worker_procs, redis_url):
    worker = worker_procs.start(module="workers", pool="threads", concurrency=2)
    worker_procs.wait_live(worker, ["chargePayment", "validateOrder", "recordAudit"])
    job = json.loads(resources.files("workers").joinpath("jobs/demo_order.json").read_text(encoding="utf-8"))
    with Client(redis_url) as client:
        handle = client.submit(job)
        record = handle.result(timeout=60)
        calls = handle.calls()
        events = [event.data for event in handle.events(follow=False, technical=True)]

    assert record["status"] == "succeeded", record
    assert record["state"]["payment"]["card"]["last4"] == "4242"  # the activity got the real number
    assert "ending 0000" in record["state"]["giftWrapPaymentError"]["error"]["message"]

    charges = [c["id"] for c in calls if c["tool"] == "chargePayment"]
    assert len(charges) == 2
    requests = [e["part"]["tools"][0]["arguments"] for e in events
                if e["event"] == "call.started" and e.get("call_id") in charges and e.get("part")]
    assert len(requests) == 2
    assert all(args["card"]["number"] == REDACTED and args["card"]["holder"] == "Ada Lovelace" for args in requests)
    technical = [e["part"]["technical_details"]["arguments"] for e in events
                 if e["event"] == "call.finished" and e.get("call_id") in charges]
    assert [args["card"]["number"] for args in technical] == [REDACTED, REDACTED]

    history = build_history_message([e["part"] for e in events if e.get("part")])
    shown = json.dumps({"events": events, "history": history, "calls": calls, "record": record}, ensure_ascii=False)
    for number in NUMBERS:
        assert number not in shown and number.replace(" ", "") not in shown
