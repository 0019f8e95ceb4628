"""The store's other parts over its one connection, built here so that no caller outside `store/` (the composition
root included) reads the raw client or the key layout to build them: the fleet's shared settings (`ConfigStore`),
the tools' rollout rules (`RolloutStore`), the schedules (`ScheduleStore`), the batch lane's state (`BatchQueue`)
and a job's reads for the client (`SyncReads`).

Each takes the connection (`StoreConnection`: `runtime/root.py` passes its `StateStore`); their own constructors
stay as they are for the tests that build one on a bare client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.store.batches import BatchQueue
from agentq.store.config import ConfigStore
from agentq.store.connection import StoreConnection
from agentq.store.rollouts import RolloutStore
from agentq.store.schedules import ScheduleStore
from agentq.store.sync_reads import SyncReads


def config_store(conn: StoreConnection, *, ttl_s: float, seeds: Mapping[str, Any]) -> ConfigStore:
    return ConfigStore(conn.redis, conn.fleet, ttl_s=ttl_s, seeds=seeds)


def rollout_store(conn: StoreConnection, *, ttl_s: float) -> RolloutStore:
    return RolloutStore(conn.redis, conn.fleet, ttl_s=ttl_s)


def schedule_store(conn: StoreConnection) -> ScheduleStore:
    return ScheduleStore(conn.redis, conn.fleet)


def batch_queue(conn: StoreConnection) -> BatchQueue:
    return BatchQueue(conn.redis, conn.fleet)


def sync_reads(conn: StoreConnection) -> SyncReads:
    return SyncReads(conn.redis, url=conn.url, namespace=conn.namespace, cluster=conn.cluster)
