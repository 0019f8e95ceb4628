"""The job-step store is a composition of parts (`store/state.py`): each concern a part of its own over the one
connection, none inheriting another, and the store's contract members forwards to them, each to the part whose
class defines that method."""

from __future__ import annotations

import inspect

from agentq.store.base import Store
from agentq.store.connection import StoreConnection
from agentq.store.forward import forwards
from agentq.store.part import StorePart
from agentq.store.state import StateStore
from agentq.store.stats import JobCounts


def test_each_forward_reaches_the_method_of_the_part_it_names(redis_store: StateStore) -> None:
    found = forwards(StateStore)
    assert len(found) > 70
    for name, forward in found.items():
        part = getattr(redis_store, forward.part)
        assert isinstance(part, StorePart) and part.conn is redis_store, name
        assert getattr(type(part), forward.name) is forward.method, name
        assert getattr(redis_store, name).__func__ is forward.method, name


def test_every_member_of_the_contract_is_the_connections_or_a_forward() -> None:
    members = {name for name in dir(Store) if not name.startswith("_") and callable(getattr(Store, name))}
    own = {name for name in vars(StoreConnection) if not name.startswith("_")}
    assert members - own <= set(forwards(StateStore)), sorted(members - own - set(forwards(StateStore)))
    for name in members - own:
        assert inspect.getattr_static(StateStore, name) is forwards(StateStore)[name], name


def test_the_parts_share_the_connection_and_no_part_inherits_another(redis_store: StateStore) -> None:
    parts = {name: part for name, part in vars(redis_store).items() if isinstance(part, StorePart)}
    assert set(parts) >= {"jobs", "copies", "calls", "ticks", "events", "concurrency", "admission", "waits",
                          "job_timers", "resumes", "active_jobs", "counts"}
    for name, part in parts.items():
        assert part.redis is redis_store.redis and part.fleet is redis_store.fleet, name
        assert type(part).__mro__[1] is StorePart, name  # a part of its own, not a mixin of another concern
    # the metrics' bookkeeping is one collaborator, given to the parts that end or hold jobs
    for name in ("jobs", "calls", "ticks", "job_timers"):
        assert getattr(redis_store, name).counts is redis_store.counts
    assert isinstance(redis_store.counts, JobCounts)
    assert redis_store.copies.jobs is redis_store.jobs
    assert StateStore.__bases__ == (StoreConnection, Store)
