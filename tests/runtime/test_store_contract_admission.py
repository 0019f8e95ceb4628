"""The admission of ready calls (docs/tenants.md), the same contract on Redis and a Redis Cluster: per
queue a window of calls admitted and not ended; the rest parked and given the places ended calls give back,
round-robin across tenants by weight, by priority inside a tenant, under each tenant's max_running_calls and each
concurrency key's limit."""

from __future__ import annotations

import time
from typing import Any

from agentq.protocol.admission import AdmissionConfig, Ticket
from tests.runtime.conftest import Backend

Q = "agentq.activity.work"


def ticket(n: int | str, tenant: str = "a", priority: int = 2, key: str = "", limit: int = 0,
           queue: str = Q) -> Ticket:
    return Ticket(member=f"job_{tenant}/call_{n}", queue=queue, tenant=tenant, priority=priority, key=key,
                  limit=limit, payload=f"payload {tenant} {n}")


def test_the_window_admits_at_once_then_parks_and_gives_ended_places_to_parked_calls(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 2})
    assert store.admit_calls([ticket(1), ticket(2), ticket(3)], config) == ["#1", "#2"]
    assert store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}
    assert store.parked_queues() == [Q]
    assert store.admit_calls([ticket(4)], config) == []  # parked behind call 3
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 3"]
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == []  # ended once
    assert store.admit_calls([], config, ended=["job_a/call_2", "job_a/call_3"]) == ["payload a 4"]
    assert store.parked_queues() == []
    assert store.admit_calls([ticket(5)], config) == ["#1"]  # the fast path again
    assert store.admit_calls([ticket(5)], config) == ["#1"]  # admitted already: sent again, counted once
    assert store.admission_counts() == {f"q:{Q}": 2, "t:a": 2}


def test_tenants_take_turns_by_weight_and_priorities_order_a_tenant_s_calls(backend: Backend):
    store = backend.store
    config = AdmissionConfig(windows={Q: 1}, weights={"b": 2})
    assert store.admit_calls([ticket(0)], config) == ["#1"]
    store.admit_calls([ticket(n) for n in range(1, 7)], config)  # tenant a's burst, parked
    store.admit_calls([ticket(1, "b", 3), ticket(2, "b", 1), ticket(3, "b"), ticket(4, "b")], config)
    order, ended = [], "job_a/call_0"
    for _ in range(10):
        (payload,) = store.admit_calls([], config, ended=[ended])
        order.append(payload.removeprefix("payload "))
        tenant, n = payload.split()[1:]
        ended = f"job_{tenant}/call_{n}"
    # b (weight 2) has two turns for a's one; b's priority 1 call first, its priority 3 call last
    assert order == ["a 1", "b 2", "b 3", "a 2", "b 4", "b 1", "a 3", "a 4", "a 5", "a 6"]


def test_a_tenant_s_max_running_calls_lets_other_tenants_go_ahead(backend: Backend):
    store = backend.store
    config = AdmissionConfig(windows={Q: 10}, maxima={"a": 2})
    assert store.admit_calls([ticket(n) for n in range(4)], config) == ["#1", "#2"]
    assert store.admit_calls([ticket(1, "b"), ticket(2, "b")], config) == ["payload b 1", "payload b 2"]
    assert store.admission_counts()["t:a"] == 2
    assert store.admit_calls([], config, ended=["job_a/call_0"]) == ["payload a 2"]


def test_a_concurrency_key_holds_its_calls_and_lets_others_pass(backend: Backend):
    store = backend.store
    config = AdmissionConfig(windows={Q: 10})
    got = store.admit_calls([ticket(1, key="acct:1", limit=1), ticket(2, key="acct:1", limit=1),
                             ticket(3, key="acct:2", limit=1)], config)
    assert got == ["#1", "payload a 3"]
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 2"]


def test_other_queues_have_their_own_windows(backend: Backend):
    store = backend.store
    config = AdmissionConfig(windows={Q: 1}, default_window=1)
    assert store.admit_calls([ticket(1), ticket(2, queue="agentq.activity.other")], config) == ["#1", "#2"]
    assert store.admit_calls([ticket(3)], config) == []


def test_a_sweep_finds_old_admissions_and_takes_turns(backend: Backend):
    store = backend.store
    store.admit_calls([ticket(1)], AdmissionConfig(windows={Q: 1}))
    assert store.admitted_before(2**53) == ["job_a/call_1"]
    assert store.admitted_before(0) == []
    assert store.take_admission_sweep("me", 60_000)
    assert not store.take_admission_sweep("other", 60_000)


def test_parked_calls_wait_for_a_batch_of_free_places(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 4}, batch=2)
    assert store.admit_calls([ticket(n) for n in range(6)], config) == ["#1", "#2", "#3", "#4"]
    assert store.admit_calls([], config, ended=["job_a/call_0"]) == []
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 4", "payload a 5"]


def test_a_call_sent_again_while_parked_stays_parked_once(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 1})
    assert store.admit_calls([ticket(1), ticket(2), ticket(2)], config) == ["#1"]  # sent twice in one step
    assert store.admit_calls([ticket(2)], config) == []  # and again by a recovery
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 2"]
    assert store.admit_calls([], config, ended=["job_a/call_2"]) == []  # parked once, admitted once
    assert store.parked_queues() == [] and store.admission_counts() == {}


def test_a_call_behind_a_full_key_is_taken_after_heads_taken_in_the_same_step(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 3})
    assert store.admit_calls([ticket(n) for n in (1, 2, 3)], config) == ["#1", "#2", "#3"]
    parked = [ticket(4, key="acct:1", limit=1), ticket(5, key="acct:1", limit=1), ticket(6), ticket(7)]
    assert store.admit_calls(parked, config) == []
    # 4 is the list's head, 5 waits for its key, 6 and 7 are taken from behind it
    got = store.admit_calls([], config, ended=["job_a/call_1", "job_a/call_2", "job_a/call_3"])
    assert got == ["payload a 4", "payload a 6", "payload a 7"]
    assert store.admission_counts() == {f"q:{Q}": 3, "t:a": 3, "k:acct:1": 1}
    assert store.admit_calls([], config, ended=["job_a/call_4"]) == ["payload a 5"]
    assert store.parked_queues() == []


def test_calls_parked_and_given_places_in_one_step_are_admitted_once(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 4}, batch=2)
    assert store.admit_calls([ticket(n) for n in range(1, 6)], config) == ["#1", "#2", "#3", "#4"]
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == []  # one free place: less than a batch
    got = store.admit_calls([ticket(6, "b")], config, ended=["job_a/call_2"])  # parked, then given a place
    assert got == ["payload a 5", "payload b 6"]
    assert store.parked_queues() == [] and store.admission_counts() == {f"q:{Q}": 4, "t:a": 3, "t:b": 1}
    assert store.admit_calls([ticket(6, "b")], config) == ["#1"]  # sent again: admitted already, not parked


def test_touching_admitted_calls_never_brings_back_an_ended_one(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 2})
    store.admit_calls([ticket(1), ticket(2)], config)
    store.admit_calls([], config, ended=["job_a/call_2"])
    store.touch_admitted(["job_a/call_1", "job_a/call_2"])
    assert store.admitted_before(2**53) == ["job_a/call_1"]
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == []
    assert store.admitted_before(2**53) == [] and store.admission_counts() == {}


def test_a_key_may_hold_tabs(backend: Backend):
    store, config = backend.store, AdmissionConfig(windows={Q: 2})
    tickets = [ticket(1, key="acct:a\tb", limit=1), ticket(2, key="acct:a\tb", limit=1)]
    assert store.admit_calls(tickets, config) == ["#1"]
    store.touch_admitted(["job_a/call_1"])
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1, "k:acct:a\tb": 1}
    assert store.admit_calls([], config, ended=["job_a/call_1"]) == ["payload a 2"]
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1, "k:acct:a\tb": 1}


def test_an_ended_call_still_parked_is_withdrawn_and_never_admitted(backend: Backend):
    """A canceled job's ready calls end (`Dispatcher.ended`): those still parked leave the line, so a canceled
    burst takes no more turns from the other tenants."""
    store, config = backend.store, AdmissionConfig(windows={Q: 1})
    assert store.admit_calls([ticket(n) for n in range(4)], config) == ["#1"]  # a 1 to 3 parked
    store.admit_calls([ticket(1, "b")], config)  # b's one call parked
    assert store.admit_calls([], config, ended=["job_a/call_1", "job_a/call_2"]) == []  # withdrawn: no place freed
    assert store.admission_counts() == {f"q:{Q}": 1, "t:a": 1}
    assert store.admit_calls([], config, ended=["job_a/call_0"]) == ["payload a 3"]  # a's turn: its first left
    assert store.admit_calls([], config, ended=["job_b/call_1"]) == []  # b's call withdrawn while a's runs
    assert store.admit_calls([], config, ended=["job_a/call_3"]) == []  # nothing left to admit
    assert store.parked_queues() == [] and store.admission_counts() == {}
    assert store.admit_calls([ticket(9, "b")], config) == ["#1"]  # the fast path again


def test_pushed_tasks_and_their_events_leave_the_step_as_they_came_whether_admitted_at_once_or_parked(
        redis_store: Any):
    """A payload made for a broker on this Redis ('!<list>\\n<channel>\\n<event>\\n<message>') is pushed as its message
    by the step that admits it, at once or from where it was parked; its event goes out with the other joinable
    events of the step's channel in one message, and an event that cannot be joined goes out alone, as it came."""
    store, config = redis_store, AdmissionConfig(windows={Q: 2})
    events = {n: f'{{"body": "WyAg{n * 4}ICBd", "properties": {{"tag": "{n}"}}}}' for n in "ABCD"}
    events["C"] = '{"not": "joinable"}'

    def pushed(n: str) -> Ticket:
        return Ticket(member=f"job_a/call_{n}", queue=Q, tenant="a", priority=2, key="", limit=0,
                      payload=f"!test:broker\ntest:events\n{events[n]}\nmessage {n}")

    pubsub = store.redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("test:events")
    pubsub.get_message(timeout=1.0)  # the subscription's confirmation

    def published(count: int) -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            if (message := pubsub.get_message(timeout=1.0)) is not None:
                got.append(message["data"])
        return got

    try:
        assert store.admit_calls([pushed("A"), pushed("B"), pushed("C"), pushed("D")], config) == ["!", "!"]
        assert store.redis.lrange("test:broker", 0, -1) == ["message B", "message A"]  # LPUSH: the first at the right
        assert published(1) == ['{"body": "WyAgAAAALCAgBBBBICBd", "properties": {"tag": "A"}}']
        assert store.admit_calls([], config, ended=["job_a/call_A", "job_a/call_B"]) == ["!", "!"]
        assert store.redis.lrange("test:broker", 0, 1) == ["message D", "message C"]
        assert sorted(published(2)) == sorted(['{"not": "joinable"}',
                                               '{"body": "WyAgDDDDICBd", "properties": {"tag": "D"}}'])
    finally:
        pubsub.close()
