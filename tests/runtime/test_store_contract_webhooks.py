"""The webhook keys (`store/webhooks.py`, the `WebhookStore` contract), the same contract on Redis and a Redis
Cluster: watched jobs and what the watcher reads of them, deliveries stored once, taken when due under a lease, their
outcomes kept."""

from __future__ import annotations

import pytest

from agentq.errors import InvalidJobIdError
from agentq.store.views import StoredDelivery, WatchedJob
from agentq.store.webhooks import WebhookKeys
from tests.runtime.conftest import Backend, make_plan, records_of


def delivery(job_id: str, delivery_id: str, state: str = "pending") -> StoredDelivery:
    return StoredDelivery(job_id=job_id, id=delivery_id, data={"id": delivery_id, "state": state, "é": "ü"},
                          body=f'{{"type":"call.finished","id":"{delivery_id}"}}'.encode())


def test_a_watched_job_is_read_with_its_state_and_cursor_until_it_is_unwatched(backend: Backend):
    hooks = WebhookKeys(backend.store, keep_s=60)
    plan = make_plan({"calls": []}, {}, job_id="job_w")
    hooks.watch("job_w", 1_000)
    hooks.watch("job_early", 2_000)  # watched before it is written (its submitter is between the two steps)
    hooks.watch("job_w", 5_000)  # watched already: its score stays
    assert hooks.watched(10) == ["job_w", "job_early"] and hooks.watched_since("job_w") == 1_000
    assert backend.store.create_job(plan, records_of(plan), submitted={}, events=[])
    hooks.set_cursor("job_w", "5-0")
    assert hooks.job_states(["job_w", "job_early"]) == [WatchedJob(status="queued", options=plan.options,
                                                                   cursor="5-0"),
                                                        WatchedJob(status=None, options=None, cursor="0-0")]
    hooks.looked_at(["job_w"], 9_000)
    assert hooks.watched(10) == ["job_early", "job_w"]  # the least recently looked at first
    hooks.unwatch("job_w")
    hooks.looked_at(["job_w"], 10_000)  # a look after the unwatch does not watch it again
    assert hooks.watched(10) == ["job_early"] and hooks.watched_since("job_w") is None
    assert hooks.awaiting_approval("job_w") == []
    with pytest.raises(InvalidJobIdError):
        hooks.watch("no spaces allowed", 1)
    assert hooks.watched(10) == ["job_early"]


def test_a_delivery_is_stored_once_taken_under_a_lease_and_its_outcome_kept(backend: Backend):
    hooks = WebhookKeys(backend.store, keep_s=60)
    first = delivery("job_d", "msg_1")
    hooks.enqueue([first, delivery("job_d", "msg_2")], 1_000)
    hooks.enqueue([delivery("job_d", "msg_1", state="other")], 1_000)  # stored already: left as it is
    assert hooks.existing("job_d", ["msg_1", "msg_3"]) == {"msg_1"}
    assert hooks.read_delivery("job_d", "msg_1") == first
    assert sorted(d["id"] for d in hooks.deliveries("job_d")) == ["msg_1", "msg_2"]

    assert hooks.claim_due(500, 10_000, 10) == []  # not due yet
    taken = hooks.claim_due(1_000, 10_000, 1)
    assert taken == [("job_d", "msg_1")] or taken == [("job_d", "msg_2")]
    assert len(hooks.claim_due(1_000, 10_000, 10)) == 1  # the other one: the taken one is a lease ahead
    assert hooks.claim_due(5_000, 10_000, 10) == []
    assert sorted(hooks.claim_due(11_000, 10_000, 10)) == [("job_d", "msg_1"), ("job_d", "msg_2")]  # leases ended

    hooks.save_delivery("job_d", "msg_1", {"id": "msg_1", "state": "delivered"}, None)  # ended: no attempt due
    hooks.save_delivery("job_d", "msg_2", {"id": "msg_2", "state": "pending"}, 50_000)  # the next attempt then
    assert hooks.read_delivery("job_d", "msg_1") == StoredDelivery("job_d", "msg_1", {"id": "msg_1",
                                                                                      "state": "delivered"},
                                                                   first.body)
    assert hooks.claim_due(49_000, 10_000, 10) == []
    assert hooks.claim_due(50_000, 10_000, 10) == [("job_d", "msg_2")]
    hooks.forget_due("job_d", "msg_2")
    assert hooks.claim_due(99_000, 10_000, 10) == []
    assert hooks.read_delivery("job_d", "msg_9") is None


def test_only_one_process_scans_per_poll(backend: Backend):
    hooks = WebhookKeys(backend.store)
    assert hooks.take_scan("a", 60_000) and not hooks.take_scan("b", 60_000)
