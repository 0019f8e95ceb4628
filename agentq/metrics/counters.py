"""This process's counters and histogram, and the calls that count into them.

They live in their own registry, not prometheus_client's global REGISTRY: a host program's metrics stay its own.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from agentq.protocol.records import CallMode, CallRecord
from agentq.runtime.routing import ACTIVITY_TASK_PREFIX

#: Call durations span a cache lookup (milliseconds) to a long agent tool or a human-speed model (an hour).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    600.0, 900.0, 1800.0, 3600.0)

ENGINE = "(engine)"  # the `activity` label of dispatchers (latent calls, modules, agent ticks) in workers_live
TOKEN_TYPES = ("input", "output", "cache_creation_input", "cache_read_input")

registry = CollectorRegistry()
CALLS = Counter("agentq_calls", "Call attempts that ended, by activity and outcome (done, failed, or retry: "
                "failed and tried again)", ["activity", "status"], registry=registry)
CALL_DURATION = Histogram("agentq_call_duration_seconds", "Run time of each call attempt that ended, by activity",
                          ["activity"], buckets=DURATION_BUCKETS, registry=registry)
REDELIVERIES = Counter("agentq_call_redeliveries", "Call tasks the broker delivered again (a worker died or "
                       "lost its connection before acknowledging them)", ["activity"], registry=registry)
LLM_REQUESTS = Counter("agentq_llm_requests", "Model requests by model and outcome (ok, retry: a transient "
                       "failure tried again, error)", ["model", "status"], registry=registry)
LLM_TOKENS = Counter("agentq_llm_tokens", "Tokens of model requests by model and type (input, output, "
                     "cache_creation_input, cache_read_input)", ["model", "type"], registry=registry)


def activity_label(record: CallRecord) -> str:
    """A call's `activity` label: its activity, or `(latent)` / `(module)` for calls the engine answers."""
    if record.mode is CallMode.EXPLICIT and record.activity:
        return record.activity
    return f"({record.mode.value})"


def call_ended(record: CallRecord, status: str, seconds: float, commit: Any = None) -> None:
    """Count an attempt of `record` that ended with `status` after `seconds`; with `commit` (the store's
    `Commit`), only when that commit took effect (a duplicate or superseded one was counted by its winner)."""
    if commit is not None and getattr(commit.outcome, "value", commit.outcome) != "committed":
        return
    activity = activity_label(record)
    CALLS.labels(activity, status).inc()
    CALL_DURATION.labels(activity).observe(max(0.0, seconds))


def count_redelivery(delivery_info: dict | None, task_name: str, record: CallRecord | None) -> None:
    """Count a call task the broker marked as delivered again (Redis restores unacknowledged tasks with the
    flag set; RabbitMQ sets it itself)."""
    if not (delivery_info or {}).get("redelivered"):
        return
    if record is not None:
        activity = activity_label(record)
    else:  # a task that carried no record: its name tells the activity
        activity = task_name.removeprefix(ACTIVITY_TASK_PREFIX) if task_name.startswith(ACTIVITY_TASK_PREFIX) \
            else ENGINE
    REDELIVERIES.labels(activity).inc()
