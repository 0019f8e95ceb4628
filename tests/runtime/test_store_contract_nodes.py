"""The store contract for Celery node names (the claims `runtime/nodes.py` decides with): claim, compare-and-set,
compare-and-delete and expiry, asserted the same on `StateStore` on the session's private Redis and on a Redis
Cluster."""

from __future__ import annotations

from agentq.store.fleet import RedisFleet
from tests.runtime.conftest import Backend

NAME = "agentq-worker@host"


def test_a_node_name_is_claimed_once_until_released(backend: Backend):
    store = backend.store
    node_names = RedisFleet(store)
    assert node_names.node_name_holder(NAME) is None
    assert node_names.claim_node_name(NAME, "first", 60_000) is None
    assert node_names.claim_node_name(NAME, "second", 60_000) == "first"  # SET NX: the claim that stands
    assert node_names.node_name_holder(NAME) == "first"
    assert node_names.claim_node_name("agentq-worker-2@host", "second", 60_000) is None  # another name is free
    assert node_names.release_node_name(NAME, "second") is False  # only the holder drops its claim
    assert node_names.node_name_holder(NAME) == "first"
    assert node_names.release_node_name(NAME, "first") is True
    assert node_names.node_name_holder(NAME) is None
    assert node_names.release_node_name(NAME, "first") is False
    assert node_names.claim_node_name(NAME, "second", 60_000) is None


def test_a_swap_replaces_only_the_expected_holder_or_an_absent_claim_when_asked(backend: Backend):
    store = backend.store
    node_names = RedisFleet(store)
    assert node_names.swap_node_name(NAME, "crashed", "restarted", 60_000) is False  # absent: not taken
    assert node_names.node_name_holder(NAME) is None
    assert node_names.swap_node_name(NAME, "mine", "mine", 60_000, or_absent=True) is True  # a renewal remakes it
    assert node_names.node_name_holder(NAME) == "mine"
    assert node_names.swap_node_name(NAME, "someone else", "thief", 60_000) is False  # never steals a claim
    assert node_names.swap_node_name(NAME, "someone else", "thief", 60_000, or_absent=True) is False
    assert node_names.swap_node_name(NAME, "mine", "taken over", 60_000) is True
    assert node_names.node_name_holder(NAME) == "taken over"


def test_a_claim_expires_after_its_ttl_and_a_renewal_extends_it(backend: Backend):
    store = backend.store
    node_names = RedisFleet(store)
    assert node_names.claim_node_name(NAME, "short", 300) is None
    backend.advance(0.15)
    assert node_names.swap_node_name(NAME, "short", "short", 600) is True  # renewed before it ran out
    backend.advance(0.4)
    assert node_names.node_name_holder(NAME) == "short"  # past the first TTL, within the renewed one
    backend.advance(0.4)
    assert node_names.node_name_holder(NAME) is None
    assert node_names.claim_node_name(NAME, "next", 60_000) is None
