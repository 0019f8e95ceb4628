"""The store contract for Celery node names (the claims `runtime/nodes.py` decides with): claim, compare-and-set,
compare-and-delete and expiry, asserted the same on `StateStore` on the session's private Redis and on a Redis
Cluster."""

from __future__ import annotations

from tests.runtime.conftest import Backend

NAME = "agentq-worker@host"


def test_a_node_name_is_claimed_once_until_released(backend: Backend):
    store = backend.store
    assert store.node_name_holder(NAME) is None
    assert store.claim_node_name(NAME, "first", 60_000) is None
    assert store.claim_node_name(NAME, "second", 60_000) == "first"  # SET NX: the claim that stands
    assert store.node_name_holder(NAME) == "first"
    assert store.claim_node_name("agentq-worker-2@host", "second", 60_000) is None  # another name is free
    assert store.release_node_name(NAME, "second") is False  # only the holder drops its claim
    assert store.node_name_holder(NAME) == "first"
    assert store.release_node_name(NAME, "first") is True
    assert store.node_name_holder(NAME) is None
    assert store.release_node_name(NAME, "first") is False
    assert store.claim_node_name(NAME, "second", 60_000) is None


def test_a_swap_replaces_only_the_expected_holder_or_an_absent_claim_when_asked(backend: Backend):
    store = backend.store
    assert store.swap_node_name(NAME, "crashed", "restarted", 60_000) is False  # absent: not taken
    assert store.node_name_holder(NAME) is None
    assert store.swap_node_name(NAME, "mine", "mine", 60_000, or_absent=True) is True  # a renewal remakes it
    assert store.node_name_holder(NAME) == "mine"
    assert store.swap_node_name(NAME, "someone else", "thief", 60_000) is False  # never steals a claim
    assert store.swap_node_name(NAME, "someone else", "thief", 60_000, or_absent=True) is False
    assert store.swap_node_name(NAME, "mine", "taken over", 60_000) is True
    assert store.node_name_holder(NAME) == "taken over"


def test_a_claim_expires_after_its_ttl_and_a_renewal_extends_it(backend: Backend):
    store = backend.store
    assert store.claim_node_name(NAME, "short", 300) is None
    backend.advance(0.15)
    assert store.swap_node_name(NAME, "short", "short", 600) is True  # renewed before it ran out
    backend.advance(0.4)
    assert store.node_name_holder(NAME) == "short"  # past the first TTL, within the renewed one
    backend.advance(0.4)
    assert store.node_name_holder(NAME) is None
    assert store.claim_node_name(NAME, "next", 60_000) is None
