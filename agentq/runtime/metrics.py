"""Prometheus metrics (SPEC §15): what happened in this process, what the fleet looks like now.

Two kinds of numbers, read from two places at every scrape (`render_metrics`):

- **Events** are counted where they happen, in the process that does them: calls ending and their durations
  (`Executor`), redeliveries (the Celery task), model requests and tokens (`MeteredLLM`). A prefork worker's
  children are separate processes, so `agentq worker` and `agentq dispatcher` put prometheus_client in
  multiprocess mode (`enable_multiprocess`): each process writes its counters to its own file under
  `AGENTQ_METRICS_DIR/<hostname>/`, and whoever renders the metrics sums the files of every host folder there
  (a volume shared by the containers of one compose project, or one machine's temp folder). Files of processes
  that are gone are folded into one archive file per kind when a worker starts, so the totals never drop (a
  drop would read as a counter reset) and the folder does not grow with every restart.
- **Fleet state** is read from Redis and the broker when scraped: jobs active and ended (`StateStore.fleet_stats`),
  calls awaiting approval, live workers per activity, queue depth per queue.

Labels are activities, statuses, models, queues: never a job or call id. Metrics of the fleet state are the
same whoever renders them, so scrape one renderer (the API's `/metrics` or `agentq metrics`) per deployment.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import re
import secrets
import socket
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

from agentq.errors import AgentQError
from agentq.llm.base import LLM, LLMAnswer, LLMRequest, OnCall
from agentq.protocol.records import CallMode, CallRecord
from agentq.protocol.status import JOB_FINAL
from agentq.runtime.health import pid_alive
from agentq.runtime.routing import ACTIVITY_TASK_PREFIX
from agentq.settings import Settings

log = logging.getLogger("agentq.metrics")

#: Call durations span a cache lookup (milliseconds) to a long agent tool or a human-speed model (an hour).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    600.0, 900.0, 1800.0, 3600.0)

ENGINE = "(engine)"  # the `activity` label of dispatchers (latent calls, modules, agent ticks) in workers_live
TOKEN_TYPES = ("input", "output", "cache_creation_input", "cache_read_input")

# This process's own counters. Not the global REGISTRY: a host program's metrics stay its own.
_registry = CollectorRegistry()
CALLS = Counter("agentq_calls", "Call attempts that ended, by activity and outcome (done, failed, or retry: "
                "failed and tried again)", ["activity", "status"], registry=_registry)
CALL_DURATION = Histogram("agentq_call_duration_seconds", "Run time of each call attempt that ended, by activity",
                          ["activity"], buckets=DURATION_BUCKETS, registry=_registry)
REDELIVERIES = Counter("agentq_call_redeliveries", "Call tasks the broker delivered again (a worker died or "
                       "lost its connection before acknowledging them)", ["activity"], registry=_registry)
LLM_REQUESTS = Counter("agentq_llm_requests", "Model requests by model and outcome (ok, retry: a transient "
                       "failure tried again, error)", ["model", "status"], registry=_registry)
LLM_TOKENS = Counter("agentq_llm_tokens", "Tokens of model requests by model and type (input, output, "
                     "cache_creation_input, cache_read_input)", ["model", "type"], registry=_registry)


# ------------------------------------------------------------------------------------------ counting


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


class MeteredLLM:
    """An `LLM` that counts each request (by model and outcome) and its tokens (by type)."""

    def __init__(self, llm: LLM):
        self.llm = llm

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        from agentq.errors import LLMRetryableError

        try:
            answer = self.llm.solve(request, on_call=on_call)
        except LLMRetryableError:
            LLM_REQUESTS.labels(request.model, "retry").inc()
            raise
        except Exception:
            LLM_REQUESTS.labels(request.model, "error").inc()
            raise
        LLM_REQUESTS.labels(request.model, "ok").inc()
        usage = answer.usage
        for kind, count in zip(TOKEN_TYPES, (usage.input_tokens, usage.output_tokens,
                                             usage.cache_creation_input_tokens, usage.cache_read_input_tokens),
                               strict=True):
            if count:
                LLM_TOKENS.labels(request.model, kind).inc(count)
        return answer

    def __getattr__(self, name: str) -> Any:  # anything else of the provider (e.g. a replay's bookkeeping)
        return getattr(self.llm, name)


def metered(llm: LLM | None) -> LLM | None:
    return MeteredLLM(llm) if llm is not None else None


# ------------------------------------------------------------------------------- multiprocess files


def metrics_dir(settings: Settings) -> Path:
    """`AGENTQ_METRICS_DIR`, or `<temp>/agentq-metrics-<uid>`: one folder per host inside."""
    if settings.metrics_dir is not None:
        return Path(settings.metrics_dir)
    user = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
    return Path(tempfile.gettempdir()) / f"agentq-metrics-{user}"


def host_folder(base: Path, hostname: str | None = None) -> Path:
    """This host's folder under `base` (the hostname, made safe as a file name)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", hostname or socket.gethostname()) or "host"
    return base / name


def multiprocess() -> bool:
    """True when this process writes its counters to files (prometheus_client's multiprocess mode)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def enable_multiprocess(settings: Settings) -> Path | None:
    """Put this process (a worker about to fork its pool) in multiprocess mode; returns the folder its
    processes write to. Call it before any metric is counted in the process.

    `PROMETHEUS_MULTIPROC_DIR`, when set, is used as it is (managed by the operator). Otherwise it is set to
    this host's folder under `metrics_dir`, after folding the files of processes that are gone into its
    archive files. A folder that cannot be written is a warning, not a worker that does not start: its
    counts then stay in each process's memory, where no scrape reads them (None is returned)."""
    external = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    folder = Path(external) if external else host_folder(metrics_dir(settings))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not external:
            fold_dead_processes(folder)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        log.warning("metrics: cannot write to %s (%s); this worker's counts will not be exported (see "
                    "AGENTQ_METRICS_DIR)", folder, error.strerror or error)
        return None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    if not multiprocess():
        values.ValueClass = values.get_value_class()
    return folder


def _pid_of(path: Path) -> int | None:
    """The pid in a metrics file's name (`counter_123.db`), None for an archive."""
    stem = path.name[:-3].rsplit("_", 1)[-1]
    return int(stem) if stem.isdigit() else None


@contextlib.contextmanager
def _folder_lock(base: Path, *, exclusive: bool) -> Iterator[None]:
    """Readers of the metrics folders (shared) against folding (exclusive): a scrape never sees a file both
    in the archive and on its own. No locking where `fcntl` does not exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        handle = open(base / ".lock", "a+b")  # noqa: SIM115  (closed below)
    except OSError:  # a read-only folder: nothing folds into it either
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        handle.close()


def fold_dead_processes(folder: Path) -> int:
    """Fold the counter and histogram files of processes that are no longer alive into one archive file per
    kind (`counter_archive.db`, ...), so their counts stay in the totals; gauge files of dead processes are
    removed. Returns how many files were folded or removed."""
    with _folder_lock(folder.parent, exclusive=True):
        dead = [path for path in folder.glob("*.db") if (pid := _pid_of(path)) is not None and not pid_alive(pid)]
        by_kind: dict[str, list[Path]] = {}
        for path in dead:
            kind = path.name.split("_", 1)[0]
            if kind == "gauge":
                path.unlink(missing_ok=True)
            else:
                by_kind.setdefault(kind, []).append(path)
        for kind, files in by_kind.items():
            archive = folder / f"{kind}_archive.db"
            sources = [*files, archive] if archive.exists() else files
            merged = MultiProcessCollector.merge([str(p) for p in sources], accumulate=False)
            partial = folder / f".{kind}_archive.partial"
            partial.unlink(missing_ok=True)
            target = MmapedDict(str(partial))
            try:
                for metric in merged:
                    for sample in metric.samples:
                        key = mmap_key(metric.name, sample.name, list(sample.labels), list(sample.labels.values()),
                                       metric.documentation)
                        target.write_value(key, sample.value, 0.0)
            finally:
                target.close()
            os.replace(partial, archive)
            for path in files:
                path.unlink(missing_ok=True)
    return len(dead)


def _file_families(settings: Settings) -> list[Metric]:
    """The counters every agentq process of every host folder wrote (and `PROMETHEUS_MULTIPROC_DIR`'s)."""
    base = metrics_dir(settings)
    folders = [p for p in base.glob("*") if p.is_dir()] if base.is_dir() else []
    external = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if external and Path(external).is_dir() and Path(external).resolve() not in {f.resolve() for f in folders}:
        folders.append(Path(external))
    if not folders:
        return []
    lock = _folder_lock(base, exclusive=False) if base.is_dir() else contextlib.nullcontext()
    with lock:
        for _ in range(3):  # a file removed between the glob and its read (by hand): look again
            files = [str(path) for folder in folders for path in folder.glob("*.db")]
            try:
                return list(MultiProcessCollector.merge(files, accumulate=True))
            except FileNotFoundError:
                continue
    return []


# ------------------------------------------------------------------------------------ fleet state


def _fleet_families(parts: Any) -> list[Metric]:
    """Jobs, approvals, workers (Redis) and queue depths (the broker), read now."""
    settings: Settings = parts.settings
    store = parts.store
    try:
        stats = store.fleet_stats()
        live_workers = store.live_workers()
        known = store.known_activities(settings.activity_memory_s)
    except AgentQError as error:
        log.warning("metrics: the state store did not answer: %s", error)
        return [GaugeMetricFamily("agentq_store_up", "1 when the state store answered this scrape", value=0)]
    jobs_total = CounterMetricFamily("agentq_jobs", "Jobs that ended, by final status", labels=["status"])
    for status in sorted(JOB_FINAL):
        jobs_total.add_metric([status.value], stats.jobs_total.get(status.value, 0))
    for status, count in sorted(stats.jobs_total.items()):
        if status not in {s.value for s in JOB_FINAL}:
            jobs_total.add_metric([status], count)
    workers = GaugeMetricFamily("agentq_workers_live", "Live workers serving each known activity; dispatchers "
                                f"under activity=\"{ENGINE}\"", labels=["activity"])
    for name, entry in known.items():
        workers.add_metric([name], len(entry.get("workers") or []))
    workers.add_metric([ENGINE], sum(1 for w in live_workers if w.get("engine")))
    queues = {settings.engine_queue, *(str(e["queue"]) for e in known.values() if e.get("queue")),
              *(str(q) for w in live_workers for q in w.get("queues") or [])}
    families: list[Metric] = [
        GaugeMetricFamily("agentq_store_up", "1 when the state store answered this scrape", value=1),
        jobs_total,
        GaugeMetricFamily("agentq_jobs_active", "Jobs queued, running or awaiting approval", value=stats.jobs_active),
        GaugeMetricFamily("agentq_approvals_pending", "Calls awaiting a reviewer's approval",
                          value=stats.approvals_pending),
        workers,
    ]
    try:
        depths = queue_depths(parts.app, sorted(queues))
    except Exception as error:  # the broker is down or refuses: the rest of the scrape still counts
        log.warning("metrics: the broker did not answer: %s", error)
        families.append(GaugeMetricFamily("agentq_broker_up", "1 when the broker answered this scrape", value=0))
        return families
    depth = GaugeMetricFamily("agentq_queue_depth", "Tasks waiting on each queue (not yet delivered to a "
                              "worker)", labels=["queue"])
    for queue, count in depths.items():
        depth.add_metric([queue], count)
    families += [GaugeMetricFamily("agentq_broker_up", "1 when the broker answered this scrape", value=1), depth]
    return families


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


# ------------------------------------------------------------------------------------------ render


def _sample_order(sample: Any) -> tuple:
    """Buckets of one label set together, by `le`, then `_count` and `_sum` (what parsers expect)."""
    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
    if sample.name.endswith("_bucket"):
        return labels, 0, float(sample.labels.get("le", "inf"))
    return labels, 1 if sample.name.endswith("_count") else 2, 0.0


def _combined(families: Iterable[Metric]) -> list[Metric]:
    """One family per name, samples with the same name and labels summed (the same counter from this process
    and from the files); `_created` samples are dropped, they mean nothing summed over processes."""
    merged: dict[str, Metric] = {}
    sums: dict[str, dict[tuple, float]] = {}
    for family in families:
        target = merged.get(family.name)
        if target is None:
            target = merged[family.name] = Metric(family.name, family.documentation, family.type)
            sums[family.name] = {}
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            key = (sample.name, tuple(sorted(sample.labels.items())))
            sums[family.name][key] = sums[family.name].get(key, 0.0) + sample.value
    for name, target in merged.items():
        for (sample_name, labels), value in sums[name].items():
            target.add_sample(sample_name, dict(labels), value)
        target.samples.sort(key=_sample_order)
    return list(merged.values())


class _Snapshot:
    """A collector yielding families computed once (a registry may call `collect` more than once)."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def collect_families(parts: Any) -> list[Metric]:
    """Every agentq metric as this process would render it now."""
    own = [] if multiprocess() else list(_registry.collect())  # else this process's counts are in its files
    return _combined([*own, *_file_families(parts.settings), *_fleet_families(parts)])


def render_metrics(parts: Any) -> tuple[bytes, str]:
    """The Prometheus text of every agentq metric and its content type, for `parts` (`agentq.runtime.root.Parts`):
    what the API's `/metrics` and `agentq metrics` serve."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(collect_families(parts)))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST


# ----------------------------------------------------------------------------------- `agentq metrics`


@dataclass
class MetricsServer:
    """`agentq metrics`: `render_metrics` over HTTP (GET /metrics), with bearer tokens unless auth is off."""

    parts: Any
    host: str
    port: int
    tokens: tuple[str, ...]  # empty: no auth (only when turned off explicitly)
    server: ThreadingHTTPServer | None = None

    def start(self) -> MetricsServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/metrics", "/metrics/"):
                    self._reply(404, b"not found: the metrics are at /metrics\n", "text/plain; charset=utf-8")
                    return
                if outer.tokens and not _accepted(self.headers.get("Authorization"), outer.tokens):
                    self._reply(401, b"missing or wrong token: send `Authorization: Bearer <token>` "
                                b"(AGENTQ_METRICS_TOKEN)\n", "text/plain; charset=utf-8",
                                {"WWW-Authenticate": "Bearer"})
                    return
                try:
                    body, content_type = render_metrics(outer.parts)
                except Exception as error:
                    log.exception("metrics: rendering failed")
                    self._reply(500, f"rendering the metrics failed: {error}\n".encode(), "text/plain")
                    return
                self._reply(200, body, content_type)

            def _reply(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics: " + format, *args)

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        return self

    def serve_forever(self) -> None:
        assert self.server is not None
        self.server.serve_forever()

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="agentq-metrics", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _accepted(header: str | None, tokens: tuple[str, ...]) -> bool:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    matches = [secrets.compare_digest(token.strip().encode(), known.encode()) for known in tokens]
    return any(matches)


__all__ = ["CALLS", "CALL_DURATION", "DURATION_BUCKETS", "LLM_REQUESTS", "LLM_TOKENS", "REDELIVERIES",
           "MeteredLLM", "MetricsServer", "activity_label", "call_ended", "collect_families", "count_redelivery",
           "enable_multiprocess", "fold_dead_processes", "metered", "metrics_dir", "render_metrics"]
