"""The models' fleet-wide rate limits (docs/rate-limits.md), the same contract on Redis and a Redis Cluster:
token buckets whose capacity is the per-minute limit, refilled continuously; a request that must wait keeps its
place (its ticket), later ones wait behind it; what a request gives back, what the API's headers say, and a pause
after a 429 reach every process."""

from __future__ import annotations

import pytest

from agentq.protocol.envelopes import TickStarted
from agentq.protocol.events import activity_part
from agentq.protocol.limits import LimitAsk, ModelLimits, Observed
from agentq.store.limits import HEADROOM_MS, RedisLimits
from agentq.store.replies import LimitGo, LimitWait
from tests.runtime.conftest import Backend

MODEL = "claude-test"
ITPM = ModelLimits(input_tokens_per_minute=60_000)  # 1,000 tokens a second


def ask(input_tokens: int = 0, requests: int = 1, output_tokens: int = 0) -> LimitAsk:
    return LimitAsk(requests, input_tokens, output_tokens)


def wait_ms(reply: object) -> int:
    assert isinstance(reply, LimitWait), reply
    return reply.wait_ms


def test_a_bucket_lets_its_capacity_through_then_makes_requests_wait_for_the_refill(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    rpm = ModelLimits(requests_per_minute=2)
    assert fleet_limits.take_model_request(MODEL, "a", rpm, ask()) == LimitGo()
    assert fleet_limits.take_model_request(MODEL, "b", rpm, ask()) == LimitGo()
    third = wait_ms(fleet_limits.take_model_request(MODEL, "c", rpm, ask()))
    # one request refills in 30 s at 2 a minute, from HEADROOM_MS after the first take (the bucket was full)
    assert 29_000 + HEADROOM_MS < third <= 30_000 + HEADROOM_MS
    fourth = wait_ms(fleet_limits.take_model_request(MODEL, "d", rpm, ask()))
    assert 59_000 + HEADROOM_MS < fourth <= 60_000 + HEADROOM_MS  # behind the third: first come, first sent
    again = wait_ms(fleet_limits.take_model_request(MODEL, "c", rpm, ask()))  # the third asks again: its place holds
    assert again <= third
    assert wait_ms(fleet_limits.take_model_request(MODEL, "d", rpm, ask())) <= fourth  # nothing taken twice
    assert fleet_limits.take_model_request("another-model", "a", rpm, ask()) == LimitGo()  # each model its own buckets


def test_a_waiting_request_goes_once_its_time_came_without_taking_again(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    assert fleet_limits.take_model_request(MODEL, "full", ITPM, ask(60_000)) == LimitGo()
    assert wait_ms(fleet_limits.take_model_request(MODEL, "next", ITPM, ask(300))) <= 300 + HEADROOM_MS
    backend.advance(0.35 + HEADROOM_MS / 1000)
    assert fleet_limits.take_model_request(MODEL, "next", ITPM, ask(300)) == LimitGo()  # its ticket, now due
    assert wait_ms(fleet_limits.take_model_request(MODEL, "later", ITPM, ask(300))) > 200  # it took its share before


def test_what_a_request_did_not_use_goes_back_to_its_bucket(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    limits = ModelLimits(input_tokens_per_minute=60_000, output_tokens_per_minute=8_000)
    assert fleet_limits.take_model_request(MODEL, "a", limits, ask(50_000, output_tokens=8_000)) == LimitGo()
    fleet_limits.settle_model_request(MODEL, limits, Observed(refund=(0, 40_000, 7_000)))  # it read 10k and wrote 1k
    assert fleet_limits.take_model_request(MODEL, "b", limits, ask(45_000, output_tokens=6_000)) == LimitGo()
    fleet_limits.settle_model_request(MODEL, limits, Observed(refund=(0, -20_000, 0)))  # it read 20k more than asked
    owed = wait_ms(fleet_limits.take_model_request(MODEL, "c", limits, ask(10_000)))
    assert 24_000 + HEADROOM_MS < owed <= 25_000 + HEADROOM_MS  # 15k owed, refilled from the headroom on


def test_the_apis_headers_teach_the_limits_and_what_remains(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    unknown = ModelLimits()
    assert fleet_limits.take_model_request(MODEL, "a", unknown, ask(5_000)) == LimitGo()  # no limit known: no wait
    fleet_limits.settle_model_request(MODEL, unknown, Observed(limits=(3, None, None), remaining=(1, None, None)))
    assert fleet_limits.take_model_request(MODEL, "b", unknown, ask()) == LimitGo()  # the one that remains
    assert 19_000 < wait_ms(fleet_limits.take_model_request(MODEL, "c", unknown, ask())) <= 20_000  # 3 a minute
    configured = ModelLimits(requests_per_minute=600)
    other = "claude-other"
    fleet_limits.settle_model_request(other, configured, Observed(limits=(60, None, None)))
    fleet_limits.settle_model_request(other, configured, Observed(remaining=(0, None, None)))
    assert 900 < wait_ms(fleet_limits.take_model_request(other, "a", configured, ask())) <= 1_000  # the account's 60


def test_a_pause_holds_every_request_of_the_model_until_it_is_over(backend: Backend):
    store = backend.store
    fleet_limits = RedisLimits(store)
    fleet_limits.settle_model_request(MODEL, ITPM, Observed(pause_s=0.4))
    assert 300 < wait_ms(fleet_limits.take_model_request(MODEL, "a", ITPM, ask(10))) <= 400
    assert 300 < wait_ms(fleet_limits.take_model_request(MODEL, "b", ModelLimits(), ask(10))) <= 400  # limited or not
    fleet_limits.settle_model_request(MODEL, ITPM, Observed(pause_s=0.1))  # a shorter pause does not shorten it
    assert wait_ms(fleet_limits.take_model_request(MODEL, "a", ITPM, ask(10))) > 250
    backend.advance(0.45)
    assert fleet_limits.take_model_request(MODEL, "a", ITPM, ask(10)) == LimitGo()
    assert fleet_limits.take_model_request(MODEL, "c", ITPM, ask(10)) == LimitGo()


def test_a_take_from_a_full_bucket_starts_its_refill_a_headroom_later(backend: Backend):
    """The API's own bucket starts refilling when the first request reaches it, after its take: this bucket waits
    HEADROOM_MS more before it refills, so a request sent within that long of its take is never early."""
    store = backend.store
    fleet_limits = RedisLimits(store)
    rpm = ModelLimits(requests_per_minute=600)  # one every 100 ms
    assert fleet_limits.take_model_request(MODEL, "a", rpm, ask(requests=600)) == LimitGo()  # the whole burst
    assert HEADROOM_MS < wait_ms(fleet_limits.take_model_request(MODEL, "b", rpm, ask())) <= HEADROOM_MS + 100
    fleet_limits.settle_model_request(MODEL, rpm, Observed(refund=(599, 0, 0)))  # given back: no refill before its time
    assert fleet_limits.take_model_request(MODEL, "c", rpm, ask(requests=598)) == LimitGo()
    assert HEADROOM_MS < wait_ms(fleet_limits.take_model_request(MODEL, "d", rpm, ask())) <= HEADROOM_MS + 200


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "a model/with {braces}"])
def test_any_model_name_has_its_own_buckets(backend: Backend, model: str):
    store = backend.store
    fleet_limits = RedisLimits(store)
    rpm = ModelLimits(requests_per_minute=1)
    assert fleet_limits.take_model_request(model, "a", rpm, ask()) == LimitGo()
    assert isinstance(fleet_limits.take_model_request(model, "b", rpm, ask()), LimitWait)


def test_a_request_let_through_starts_in_the_same_step_and_a_deferred_one_does_not(backend: Backend):
    """The events a request starts with ride in the take on one Redis (one round trip fewer per tick); on a
    cluster the job's stream is in another slot and the caller appends them itself."""
    store = backend.store
    fleet_limits = RedisLimits(store)
    rpm = ModelLimits(requests_per_minute=1)
    job_id = "job_started_in_take"

    def started(tick: int) -> tuple[str, list[TickStarted]]:
        part = activity_part(f"Tick {tick}", source="agentq")
        return job_id, [TickStarted(job_id=job_id, tick=tick, attempt=1, part=part)]

    went = fleet_limits.take_model_request(MODEL, "a", rpm, ask(), started=started(1))
    assert went == LimitGo(started=backend.name != "cluster")
    deferred = fleet_limits.take_model_request(MODEL, "b", rpm, ask(), started=started(2))
    assert isinstance(deferred, LimitWait)  # not started: nothing appended
    ticks = [e["tick"] for _, e in store.read_events(job_id) if e["event"] == "tick.started"]
    assert ticks == ([] if backend.name == "cluster" else [1])
