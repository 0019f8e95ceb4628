"""`Metrics`: one process's counters and histogram, and the calls that count into them.

The composition root (`runtime/root.py`) creates one per process and hands it to the parts that count — the engine's
`CallMetrics` hook (the executor's and the job service's), the call task's redelivery count, the metered LLM
(`llm.metered`) — and to the renderer (`Parts.metrics`), as dramatiq's and Temporal's metrics take their registry.
Its counters live in its own registry, not prometheus_client's global REGISTRY: a host program's metrics stay its
own. In multiprocess mode (`files.py`) every count is also written to this process's files, which prometheus_client
keys by metric and labels alone: keep to one `Metrics` per process there (`Runtime` builds one).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from agentq.engine.routing import ACTIVITY_TASK_PREFIX
from agentq.protocol.records import CallMode, CallRecord
from agentq.protocol.tenants import DEFAULT_TENANT

#: Call durations span a cache lookup (milliseconds) to a long agent tool or a human-speed model (an hour).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    600.0, 900.0, 1800.0, 3600.0)

ENGINE = "(engine)"  # the `activity` label of dispatchers (latent calls, modules, agent ticks) in workers_live
TOKEN_TYPES = ("input", "output", "cache_creation_input", "cache_read_input")


class Metrics:
    """One process's counters (`agentq_calls`, `agentq_call_duration_seconds`, `agentq_call_redeliveries`,
    `agentq_llm_requests`, `agentq_llm_tokens`, `agentq_llm_cost_usd`, `agentq_webhook_attempts`) in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.calls = Counter("agentq_calls", "Call attempts that ended, by activity, outcome (done, failed, or "
                             "retry: failed and tried again) and tenant (configured ones; default; other)",
                             ["activity", "status", "tenant"], registry=self.registry)
        self.call_duration = Histogram("agentq_call_duration_seconds", "Run time of each call attempt that ended, "
                                       "by activity", ["activity"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.redeliveries = Counter("agentq_call_redeliveries", "Call tasks the broker delivered again (a worker "
                                    "died or lost its connection before acknowledging them)", ["activity"],
                                    registry=self.registry)
        self.llm_requests = Counter("agentq_llm_requests", "Model requests by model and outcome (ok, retry: a "
                                    "transient failure tried again, error)", ["model", "status"],
                                    registry=self.registry)
        self.llm_tokens = Counter("agentq_llm_tokens", "Tokens of model requests by model and type (input, output, "
                                  "cache_creation_input, cache_read_input)", ["model", "type"], registry=self.registry)
        self.llm_cost = Counter("agentq_llm_cost_usd", "Cost of answered model requests in US dollars, by model, "
                                "priced by the price table (AGENTQ_LLM_PRICES); unpriced requests are not counted",
                                ["model"], registry=self.registry)
        self.webhook_attempts = Counter("agentq_webhook_attempts", "Webhook delivery attempts by event type and "
                                        "outcome (delivered, retry: tried again later, failed: given up)",
                                        ["type", "outcome"], registry=self.registry)

    def webhook_attempted(self, event_type: str, outcome: str) -> None:
        """Count one webhook delivery attempt (docs/webhooks.md)."""
        self.webhook_attempts.labels(event_type, outcome).inc()

    def call_ended(self, record: CallRecord, status: str, seconds: float, *, tenant: str = DEFAULT_TENANT) -> None:
        """Count an attempt of `record` that ended with `status` after `seconds`, of a job whose `tenant` label is
        `tenant` (`metrics/tenants.py`). The engine's hooks tell only of attempts whose outcome took effect: a
        duplicate was counted by its winner."""
        activity = activity_label(record)
        self.calls.labels(activity, status, tenant).inc()
        self.call_duration.labels(activity).observe(max(0.0, seconds))

    def count_sent_again(self, record: CallRecord) -> None:
        """Count a call task the admission's sweep sent again, its worker dead (`runtime/admission_sweep.py`): where
        the broker is the store's Redis, a call's task is not kept unacknowledged, so the store, not the broker,
        delivers it again."""
        self.redeliveries.labels(activity_label(record)).inc()

    def count_redelivery(self, delivery_info: dict | None, task_name: str, record: CallRecord | None) -> None:
        """Count a call task the broker marked as delivered again (Redis restores unacknowledged tasks with the
        flag set; RabbitMQ sets it itself)."""
        if not (delivery_info or {}).get("redelivered"):
            return
        if record is not None:
            activity = activity_label(record)
        else:  # a task that carried no record: its name tells the activity
            activity = task_name.removeprefix(ACTIVITY_TASK_PREFIX) if task_name.startswith(ACTIVITY_TASK_PREFIX) \
                else ENGINE
        self.redeliveries.labels(activity).inc()


def activity_label(record: CallRecord) -> str:
    """A call's `activity` label: its activity, or `(latent)` / `(module)` for calls the engine answers."""
    if record.mode is CallMode.EXPLICIT and record.activity:
        return record.activity
    return f"({record.mode.value})"
