"""The fleet's shared settings over a real Redis (`store/config.py`, `runtime/fleet_config.py`): seeding only what
is unset, versions, a heartbeat's reuse, parsing once per version, and what a process uses when the store is down
or holds a broken value."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from agentq.errors import ConfigValueError
from agentq.runtime.fleet_config import FleetConfig
from agentq.store.config import ConfigStore
from agentq.store.keys import FleetKeys

FLEET = FleetKeys("agentq")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(redis_url: str) -> Any:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


def config(client: Any, seeds: dict | None = None, clock: Clock | None = None, ttl_s: float = 10.0) -> FleetConfig:
    store = ConfigStore(client, FLEET, ttl_s=ttl_s, seeds=seeds, clock=clock or Clock())
    return FleetConfig(store, dict(seeds or {}))


def test_the_first_process_with_a_variable_seeds_it_and_later_ones_warn_and_use_the_fleets(client, caplog):
    first = config(client, {"tenants": {"acme": {"jobs_per_minute": 2}}})
    assert first.tenant_limits()["acme"].jobs_per_minute == 2
    with caplog.at_level(logging.WARNING, logger="agentq.config"):
        second = config(client, {"tenants": {"acme": {"jobs_per_minute": 9}}, "llm_limits": {"*": {
            "requests_per_minute": 5}}})
        assert second.tenant_limits()["acme"].jobs_per_minute == 2  # the fleet's, not this process's
    assert "AGENTQ_TENANTS is set here but the fleet's config tenants differs" in caplog.text
    assert second.model_limits()["*"].requests_per_minute == 5  # an unset name is seeded by whoever has it
    shown = second.show()
    assert (shown["tenants"]["version"], shown["tenants"]["source"]) == (1, "AGENTQ_TENANTS")
    assert (shown["llm_limits"]["version"], shown["llm_limits"]["source"]) == (1, "AGENTQ_LLM_LIMITS")
    assert shown["llm_prices"]["version"] == 0 and shown["llm_prices"]["value"] is None


def test_each_set_is_a_new_version_seen_by_other_processes_after_their_heartbeat(client):
    clock = Clock()
    reader = config(client, clock=clock)
    writer = config(client)
    assert reader.tenant_limits() == {}
    assert writer.set("tenants", {"acme": {"max_active_jobs": 1}})["version"] == 1
    assert writer.tenant_limits()["acme"].max_active_jobs == 1  # its own change at once
    assert reader.tenant_limits() == {}  # read 0 s ago: reused for a heartbeat
    clock.now += 10
    limits = reader.tenant_limits()
    assert limits["acme"].max_active_jobs == 1
    assert reader.tenant_limits() is limits  # parsed once per version
    assert writer.set("tenants", {"acme": {"max_active_jobs": 2}})["version"] == 2
    clock.now += 10
    assert reader.tenant_limits()["acme"].max_active_jobs == 2


def test_a_refused_value_writes_nothing_and_names_every_problem(client):
    fleet = config(client)
    fleet.set("webhook_allowlist", ["127.0.0.1"])
    before = client.hgetall(FLEET.config)
    with pytest.raises(ConfigValueError) as refused:
        fleet.set("webhook_allowlist", ["ok.example", "", "10.0.0.0/99", 7])
    assert [p.pointer for p in refused.value.problems] == ["/1", "/2", "/3"]
    with pytest.raises(ConfigValueError) as unknown:
        fleet.set("tenant", {})
    assert str(unknown.value) == ("no config named 'tenant': the fleet's config names are llm_limits, llm_prices, "
                                  "tenants, webhook_allowlist")
    with pytest.raises(ConfigValueError) as prices:
        fleet.set("llm_prices", {})
    assert [p.pointer for p in prices.value.problems] == [""]
    assert client.hgetall(FLEET.config) == before
    assert fleet.allowlist().lists_host("127.0.0.1")


def test_the_store_down_keeps_the_last_values_and_a_broken_stored_value_gives_the_defaults(client, caplog):
    unreachable = redis.Redis.from_url("redis://127.0.0.1:1/0", decode_responses=True, socket_connect_timeout=0.2)
    alone = config(unreachable, {"tenants": {"acme": {"weight": 3}}})
    assert alone.tenant_limits()["acme"].weight == 3  # this process's environment, before any read
    assert alone.prices().price("claude-sonnet-4-6") is not None  # unset: the shipped prices
    client.hset(FLEET.config, "llm_limits", '{"version": 4, "value": {"m": {"requests_per_minute": -1}}}')
    with caplog.at_level(logging.ERROR, logger="agentq.config"):
        assert config(client).model_limits() == {}
    assert "config llm_limits (version 4) is not valid, its defaults are used" in caplog.text
