"""The fleet's state, read when scraped: jobs, approvals, live workers and the rollout routes' figures from the
state store, queue depths from the broker. Either being down is a gauge at 0 (`agentq_store_up`,
`agentq_broker_up`), never a failed scrape."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agentq.errors import AgentQError
from agentq.metrics.counters import ENGINE
from agentq.metrics.tenants import TenantLabels
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.status import JOB_FINAL
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.settings import Settings

if TYPE_CHECKING:
    from agentq.runtime.root import Parts

log = logging.getLogger("agentq.metrics")


def fleet_families(parts: Parts) -> list[Metric]:
    """Jobs, approvals, workers (Redis) and queue depths (the broker), read now."""
    settings: Settings = parts.settings
    try:
        stats = parts.stats.fleet_stats()
        live_workers: list[WorkerAnnouncement] = parts.fleet.live_workers()
        known = parts.fleet.known_activities(settings.activity_memory_s)
        rollouts = parts.rollouts.report()
    except AgentQError as error:
        log.warning("metrics: the state store did not answer: %s", error)
        return [GaugeMetricFamily("agentq_store_up", "1 when the state store answered this scrape", value=0)]
    families: list[Metric] = [
        GaugeMetricFamily("agentq_store_up", "1 when the state store answered this scrape", value=1),
        _jobs_ended(stats.jobs_total, stats.jobs_by_tenant, parts.tenant_labels),
        GaugeMetricFamily("agentq_jobs_active", "Jobs waiting for concurrency keys, queued, running or awaiting "
                          "approval", value=stats.jobs_active),
        GaugeMetricFamily("agentq_approvals_pending", "Calls awaiting a reviewer's approval",
                          value=stats.approvals_pending),
        _workers_live(known, live_workers),
        *_rollout_families(rollouts),
    ]
    queues = {settings.engine_queue, *(str(e["queue"]) for e in known.values() if e.get("queue")),
              *(q for w in live_workers for q in w.queues)}
    return families + _broker_families(parts.app, sorted(queues))


def _jobs_ended(jobs_total: dict[str, int], by_tenant: dict[tuple[str, ...], int],
                labels: TenantLabels) -> CounterMetricFamily:
    """`agentq_jobs`: by status and `tenant` label (`metrics/tenants.py`), every final status under `default` at
    least (0 when none ended with it). Jobs counted before the store kept the tenant are under `default`."""
    family = CounterMetricFamily("agentq_jobs", "Jobs that ended, by final status and tenant (configured tenants; "
                                 "default; other)", labels=["status", "tenant"])
    counts: dict[tuple[str, str], int] = {(final.value, DEFAULT_TENANT): 0 for final in JOB_FINAL}
    for (status, tenant), count in by_tenant.items():
        key = (status, labels.label(tenant))
        counts[key] = counts.get(key, 0) + count
    for status, total in jobs_total.items():
        untold = total - sum(count for (counted, _), count in by_tenant.items() if counted == status)
        if untold > 0:
            counts[(status, DEFAULT_TENANT)] = counts.get((status, DEFAULT_TENANT), 0) + untold
    for (status, tenant), count in sorted(counts.items()):
        family.add_metric([status, tenant], count)
    return family


def _workers_live(known: dict[str, Any], live_workers: list[WorkerAnnouncement]) -> GaugeMetricFamily:
    """`agentq_workers_live`: live workers per known activity, dispatchers under `ENGINE`."""
    family = GaugeMetricFamily("agentq_workers_live", "Live workers serving each known activity; dispatchers "
                               f"under activity=\"{ENGINE}\"", labels=["activity"])
    for name, entry in known.items():
        family.add_metric([name], len(entry.get("workers") or []))
    family.add_metric([ENGINE], sum(1 for w in live_workers if w.engine))
    return family


ROUTE_LABELS = {"": "(latent)", "*": "(usual)"}  # a rollout route's label: the model, the usual resolution


def _rollout_families(report: dict[str, Any]) -> list[Metric]:
    """The rollout report (docs/rollouts.md) as metrics: calls by outcome, cost, and the p50/p95."""
    calls = CounterMetricFamily("agentq_rollout_calls", "Calls of tools with a rollout rule that ended, by tool, "
                                "route and outcome (done, failed)", labels=["tool", "route", "outcome"])
    cost = CounterMetricFamily("agentq_rollout_cost_usd", "US dollars of the model requests of a rollout route's "
                               "calls (left out while one was unpriced)", labels=["tool", "route"])
    duration = GaugeMetricFamily("agentq_rollout_duration_seconds", "Run time of a rollout route's calls at a "
                                 "quantile (0.5, 0.95; within 1%)", labels=["tool", "route", "quantile"])
    for tool, entry in report["tools"].items():
        for row in entry["routes"]:
            route = ROUTE_LABELS.get(row["route"], row["route"])
            calls.add_metric([tool, route, "done"], row["done"])
            calls.add_metric([tool, route, "failed"], row["failed"])
            if row["cost_usd"] is not None:
                cost.add_metric([tool, route], row["cost_usd"])
            for quantile, key in (("0.5", "p50_s"), ("0.95", "p95_s")):
                if row[key] is not None:
                    duration.add_metric([tool, route, quantile], row[key])
    return [calls, cost, duration]


def _broker_families(app: Any, queues: list[str]) -> list[Metric]:
    """`agentq_broker_up` and, when the broker answered, `agentq_queue_depth` per queue."""
    try:
        depths = queue_depths(app, queues)
    except Exception as error:  # the broker is down or refuses: the rest of the scrape still counts
        log.warning("metrics: the broker did not answer: %s", error)
        return [GaugeMetricFamily("agentq_broker_up", "1 when the broker answered this scrape", value=0)]
    depth = GaugeMetricFamily("agentq_queue_depth", "Tasks waiting on each queue (not yet delivered to a "
                              "worker)", labels=["queue"])
    for queue, count in depths.items():
        depth.add_metric([queue], count)
    return [GaugeMetricFamily("agentq_broker_up", "1 when the broker answered this scrape", value=1), depth]


def queue_depths(app: Any, queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting on each queue, by a passive declare (Redis: the queue's lists, all priorities;
    RabbitMQ: the queue's ready messages). A queue that does not exist yet holds nothing."""
    depths: dict[str, int] = {}
    with app.connection_for_read() as connection:
        connection.ensure_connection(max_retries=1)
        channel = connection.channel()
        try:
            for queue in queues:
                try:
                    depths[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
                except connection.channel_errors:
                    depths[queue] = 0
                    with contextlib.suppress(Exception):  # AMQP closes a channel on a missing queue
                        channel.close()
                    channel = connection.channel()
        finally:
            with contextlib.suppress(Exception):
                channel.close()
    return depths
