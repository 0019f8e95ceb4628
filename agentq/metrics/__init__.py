"""Prometheus metrics (docs/metrics.md): what happened in this process, what the fleet looks like now.

Two kinds of numbers, read from two places at every scrape (`render_metrics`):

- **Events** are counted where they happen, in the process that does them, into the `Metrics` its composition root
  made: calls ending and their durations (the engine's `CallMetrics` hook), redeliveries (the Celery task), model
  requests and tokens (`MeteredLLM`). A prefork worker's children are separate processes, so `agentq worker` and
  `agentq dispatcher` put prometheus_client in multiprocess mode (`enable_multiprocess`): each process writes its
  counters to its own file under `AGENTQ_METRICS_DIR/<hostname>/`, and whoever renders the metrics sums the files of
  every host folder there (a volume shared by the containers of one compose project, or one machine's temp folder).
  Files of processes that are gone are folded into one archive file per kind when a worker starts, so the totals
  never drop (a drop would read as a counter reset) and the folder does not grow with every restart.
- **Fleet state** is read from Redis and the broker when scraped: jobs active and ended (`StatsStore.fleet_stats`),
  calls awaiting approval, live workers per activity, queue depth per queue.

Labels are activities, statuses, models, queues: never a job or call id. Metrics of the fleet state are the
same whoever renders them, so scrape one renderer (the API's `/metrics` or `agentq metrics`) per deployment.

- `counters` — `Metrics`: one process's counters and histogram, and the calls that count into them.
- `llm` — `MeteredLLM`: a provider wrapper counting requests and tokens.
- `files` — multiprocess mode: the folders, folding dead processes' files into archives, reading every file.
- `fleet` — the fleet's state, read at scrape time from the state store and the broker.
- `render` — every family combined into the Prometheus text.
- `server` — `MetricsServer`: `agentq metrics`, the metrics over HTTP with bearer tokens.
"""

from __future__ import annotations

from agentq.metrics.counters import DURATION_BUCKETS, ENGINE, TOKEN_TYPES, Metrics, activity_label
from agentq.metrics.files import enable_multiprocess, fold_dead_processes, host_folder, metrics_dir, multiprocess
from agentq.metrics.fleet import queue_depths
from agentq.metrics.llm import MeteredLLM, metered
from agentq.metrics.render import collect_families, render_metrics
from agentq.metrics.server import MetricsServer

__all__ = ["DURATION_BUCKETS", "ENGINE", "TOKEN_TYPES", "MeteredLLM", "Metrics", "MetricsServer", "activity_label",
           "collect_families", "enable_multiprocess", "fold_dead_processes", "host_folder", "metered", "metrics_dir",
           "multiprocess", "queue_depths", "render_metrics"]
